-- Drives maka-acp through avante.nvim's own ACP client (avante.libs.acp_client) in headless
-- Neovim, configured by avante's real setup() from the avante snippet of docs/editors.md (the
-- command pointed at this build, the model URL swapped for the scripted provider). Permission
-- dialogs are answered the way avante's confirm popup does (avante.ui.acp_confirm_adapter):
-- "Allow all" the first time. Writes a JSON report to $REPORT. Run by scripts/editor-check.
local out = { turns = {} }
local finished = false
local function report()
  local f = io.open(os.getenv("REPORT"), "w")
  f:write(vim.json.encode(out))
  f:close()
end

local ok, err = pcall(function()
  local page = table.concat(vim.fn.readfile(os.getenv("DOCS_EDITORS")), "\n")
  local snippet = page:match("<!%-%- snippet: avante %-%->%s*```lua\n(.-)\n```")
  assert(snippet, "no avante snippet in docs/editors.md")
  snippet = snippet:gsub('"maka%-acp"', string.format("%q", os.getenv("MAKA_BIN")))
  -- avante starts agents with PATH and the configured variables only: the data dir goes there.
  snippet = snippet:gsub('MAKA_OPENAI_BASE_URL = "[^"]*",', string.format("MAKA_SCRIPT = %q, MAKA_DATA_DIR = %q,", os.getenv("SCRIPT_FILE"), os.getenv("MAKA_DATA_DIR")))
  assert(loadstring(snippet))()
  out.snippet_used = true

  local Config = require("avante.config")
  local provider = Config.acp_providers[Config.provider]
  assert(provider, "the snippet's provider is an ACP provider")
  local ACPClient = require("avante.libs.acp_client")
  local Confirm = require("avante.ui.acp_confirm_adapter")
  local turn
  local client = ACPClient:new(vim.tbl_deep_extend("force", provider, {
    handlers = {
      on_session_update = function(u)
        if u.sessionUpdate == "agent_message_chunk" then
          turn.text = turn.text .. (u.content.text or "")
        elseif u.sessionUpdate == "tool_call" or u.sessionUpdate == "tool_call_update" then
          table.insert(turn.statuses, (u.toolCallId or "") .. ":" .. (u.status or ""))
        end
      end,
      on_request_permission = function(tool_call, options, callback)
        local m = Confirm.map_acp_options(options)
        local pick = turn.answer == "all" and m.all or m.yes
        local name
        for _, o in ipairs(options) do if o.optionId == pick then name = o.name end end
        table.insert(turn.permissions, { title = tool_call.title, n = #options, sent = pick, label = name })
        callback(pick)
      end,
      on_read_file = function(path, _, _, callback)
        local f = io.open(path)
        local content = f and f:read("*a") or ""
        if f then f:close() end
        callback(content)
      end,
      on_write_file = function(path, content, callback)
        local f = io.open(path, "w")
        f:write(content)
        f:close()
        callback(nil)
      end,
    },
  }))

  local function prompt(session_id, text, answer, next_step)
    turn = { text = "", statuses = {}, permissions = {}, answer = answer }
    table.insert(out.turns, turn)
    client:send_prompt(session_id, { client:create_text_content(text) }, function(result, e)
      turn.stop = result and result.stopReason
      turn.error = e and e.message
      turn.answer = nil
      next_step()
    end)
  end

  client:connect(function(cerr)
    assert(not cerr, vim.inspect(cerr))
    out.agent = client.agent_info or (client.agent_capabilities and "connected")
    client:create_session(vim.fn.getcwd(), {}, function(session_id, serr)
      assert(session_id, vim.inspect(serr))
      out.session_id = session_id
      prompt(session_id, "<task>please write the file</task>", "all", function()
        prompt(session_id, "please write the file again", "once", function()
          prompt(session_id, "/permissions", "once", function()
            client:stop()
            finished = true
          end)
        end)
      end)
    end)
  end)
  vim.wait(60000, function() return finished end, 20)
  assert(finished, "the conversation did not finish")
end)
if not ok then out.failure = tostring(err) end
report()
vim.cmd("qa!")
