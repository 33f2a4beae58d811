-- Drives maka-acp through CodeCompanion.nvim's own ACP client code (Connection + PromptBuilder),
-- answering permission dialogs the way its chat UI's "Accept" does (the option of kind
-- allow_once, last one of that kind winning, as build_kind_map does). Writes a JSON report.
local out = {}
local function done(code)
  local f = io.open(os.getenv("REPORT"), "w")
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd("qa!")
end

require("codecompanion").setup({
  adapters = {
    acp = {
      maka = function()
        return require("codecompanion.adapters").extend("goose", {
          name = "maka",
          formatted_name = "Maka",
          commands = { default = { os.getenv("MAKA_BIN") } },
        })
      end,
    },
  },
})

local ok, err = pcall(function()
  local adapter = require("codecompanion.adapters").resolve("maka")
  local Connection = require("codecompanion.acp")
  local conn = Connection.new({ adapter = adapter })
  assert(conn:connect_and_authenticate(), "connect")
  assert(conn:ensure_session(), "session")
  out.session_id = conn.session_id

  local function prompt(text)
    local r = { chunks = {}, tools = {}, statuses = {}, permissions = {}, done = false }
    local builder = conn:session_prompt({ { role = "user", content = text, _meta = { sent = false } } })
    builder
      :on_message_chunk(function(c) table.insert(r.chunks, c) end)
      :on_tool_call(function(t) r.tools[t.toolCallId] = t.title; table.insert(r.statuses, t.toolCallId .. ":" .. (t.status or "")) end)
      :on_tool_update(function(t) table.insert(r.statuses, t.toolCallId .. ":" .. (t.status or "")) end)
      :on_permission_request(function(req)
        local map = {}
        for _, o in ipairs(req.options) do map[o.kind] = o.optionId end
        table.insert(r.permissions, { title = req.tool_call.title, accept = map.allow_once, n = #req.options })
        req.respond(map.allow_once, false)
      end)
      :on_complete(function(reason) r.stop = reason; r.done = true end)
      :on_error(function(e) r.error = e; r.done = true end)
      :send()
    vim.wait(20000, function() return r.done end, 20)
    r.text = table.concat(r.chunks)
    r.chunks = nil
    return r
  end

  out.first = prompt("<task>\nplease write the file\n</task>")
  out.second = prompt("please write the file again")
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
