-- Drives maka-acp through CodeCompanion.nvim's own ACP client code (Connection + PromptBuilder),
-- answering permission dialogs the way its chat UI does (by option kind, the last one of a kind
-- winning, as build_kind_map does): "Always accept" first, so the second turn asks nothing.
-- Writes a JSON report.
local out = {}
local answer_with
local function done(code)
  local f = io.open(os.getenv("REPORT"), "w")
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd("qa!")
end

-- The configuration is the CodeCompanion snippet of docs/editors.md, as written, with the
-- command pointed at this build and the model URL swapped for the scripted provider (a file
-- path, which CodeCompanion's env handling turns into the file's contents: inline JSON).
local page = table.concat(vim.fn.readfile(os.getenv("DOCS_EDITORS")), "\n")
local snippet = page:match("<!%-%- snippet: codecompanion %-%->%s*```lua\n(.-)\n```")
assert(snippet, "no codecompanion snippet in docs/editors.md")
snippet = snippet:gsub('"maka%-acp"', string.format("%q", os.getenv("MAKA_BIN")))
snippet = snippet:gsub('MAKA_OPENAI_BASE_URL = "[^"]*",', string.format("MAKA_SCRIPT = %q,", os.getenv("SCRIPT_FILE")))
assert(loadstring(snippet))()
out.snippet_used = true

local ok, err = pcall(function()
  local adapter = require("codecompanion.adapters").resolve("maka")
  local Connection = require("codecompanion.acp")
  local conn = Connection.new({ adapter = adapter })
  assert(conn:connect_and_authenticate(), "connect")
  assert(conn:ensure_session(), "session")
  out.session_id = conn.session_id

  local function prompt(text, answer)
    answer_with = answer
    local r = { chunks = {}, tools = {}, statuses = {}, permissions = {}, done = false }
    local builder = conn:session_prompt({ { role = "user", content = text, _meta = { sent = false } } })
    builder
      :on_message_chunk(function(c) table.insert(r.chunks, c) end)
      :on_tool_call(function(t) r.tools[t.toolCallId] = t.title; table.insert(r.statuses, t.toolCallId .. ":" .. (t.status or "")) end)
      :on_tool_update(function(t) table.insert(r.statuses, t.toolCallId .. ":" .. (t.status or "")) end)
      :on_permission_request(function(req)
        -- As CodeCompanion's chat UI: kind -> optionId, the last of a kind winning. The
        -- first dialog is answered with its "Always accept".
        local map = {}
        local names = {}
        for _, o in ipairs(req.options) do map[o.kind] = o.optionId; names[o.optionId] = o.name end
        local pick = answer_with == "always" and map.allow_always or map.allow_once
        table.insert(r.permissions, { title = req.tool_call.title, sent = pick, label = names[pick], n = #req.options })
        req.respond(pick, false)
      end)
      :on_complete(function(reason) r.stop = reason; r.done = true end)
      :on_error(function(e) r.error = e; r.done = true end)
      :send()
    vim.wait(20000, function() return r.done end, 20)
    r.text = table.concat(r.chunks)
    r.chunks = nil
    return r
  end

  out.first = prompt("<task>\nplease write the file\n</task>", "always")
  out.second = prompt("please write the file again", "once")
  out.permissions = prompt("/permissions", "once").text
  local ids = {}
  for _, turn in ipairs({ out.first, out.second }) do
    for id, _ in pairs(turn.tools) do table.insert(ids, id) end
  end
  out.tool_ids = ids
  out.sessions = conn:session_list()
  conn:disconnect()
end)
if not ok then out.failure = tostring(err) end
done()
