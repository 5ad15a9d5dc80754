-- A scripted Neovim LSP session against `stridelens serve` (run headless by test_neovim.py).
-- Opens an example, waits for diagnostics, asks for a hover and code actions, checks them,
-- and exits 0 on success, non-zero (with the reason on stderr) on any failure.
-- Works with Neovim 0.7 (start_client + buf_attach_client) and newer (same API, still there).

local function fail(code, msg)
  io.stderr:write("nvim-session: " .. msg .. "\n")
  vim.cmd("cquit " .. code)
end

-- Watchdog: a Lua error or a hang leaves headless nvim idle forever otherwise.
local timer = vim.loop.new_timer()
timer:start(120000, 0, vim.schedule_wrap(function() fail(90, "watchdog: session took over 120 s") end))

local function main()
  local python = assert(os.getenv("STRIDELENS_PYTHON"), "STRIDELENS_PYTHON not set")
  local file = assert(os.getenv("STRIDELENS_FILE"), "STRIDELENS_FILE not set")
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  vim.bo.filetype = "python"  -- under -u NONE nothing detects it
  local buf = vim.api.nvim_get_current_buf()

  local client_id = vim.lsp.start_client({
    name = "stridelens",
    cmd = { python, "-m", "stridelens", "serve" },
    root_dir = vim.fn.fnamemodify(file, ":h"),
    init_options = { inlayHints = "shapes" },
  })
  if not client_id then return fail(2, "could not start the server") end
  vim.lsp.buf_attach_client(buf, client_id)

  -- Diagnostics: wait for the exact pass (SL101 needs meta replay, i.e. torch).
  local found = vim.wait(90000, function()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.code == "SL101" then return true end
    end
    return false
  end, 100)
  if not found then return fail(3, "no SL101 diagnostic") end
  local sl101
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if d.code == "SL101" then sl101 = d end
  end
  local line = vim.api.nvim_buf_get_lines(buf, sl101.lnum, sl101.lnum + 1, false)[1]
  if not line:find("xt.view", 1, true) then return fail(4, "SL101 on the wrong line: " .. line) end

  local client = vim.lsp.get_client_by_id(client_id)
  local enc = client.offset_encoding or "utf-16"

  -- Hover on `xt` (line "xt = x.transpose(0, 1)").
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local xt_line
  for i, l in ipairs(lines) do
    if l:match("^xt = ") then xt_line = i - 1 end
  end
  vim.api.nvim_win_set_cursor(0, { xt_line + 1, 0 })
  local params = vim.lsp.util.make_position_params(0, enc)
  local replies = vim.lsp.buf_request_sync(buf, "textDocument/hover", params, 30000)
  local hover_text
  for _, r in pairs(replies or {}) do
    if r.result and r.result.contents then hover_text = r.result.contents.value end
  end
  if not hover_text then return fail(5, "no hover") end
  if not hover_text:find("(3, 2, 4)", 1, true) or not hover_text:find("view of `x`", 1, true) then
    return fail(6, "unexpected hover: " .. hover_text)
  end

  -- Operation hover on `view` of the SL101 line.
  local col = line:find("view", 1, true) - 1
  vim.api.nvim_win_set_cursor(0, { sl101.lnum + 1, col })
  params = vim.lsp.util.make_position_params(0, enc)
  replies = vim.lsp.buf_request_sync(buf, "textDocument/hover", params, 30000)
  local op_text
  for _, r in pairs(replies or {}) do
    if r.result and r.result.contents then op_text = r.result.contents.value end
  end
  if not op_text or not op_text:find("raises at run time", 1, true) then
    return fail(7, "unexpected operation hover: " .. tostring(op_text))
  end

  -- Code actions for the SL101 diagnostic: the quick fix and the suppression.
  local lsp_diag = sl101.user_data and sl101.user_data.lsp or {
    range = { start = { line = sl101.lnum, character = sl101.col },
              ["end"] = { line = sl101.end_lnum, character = sl101.end_col } },
    code = sl101.code, message = sl101.message, source = sl101.source,
  }
  local ca_params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    range = lsp_diag.range,
    context = { diagnostics = { lsp_diag }, only = { "quickfix" } },
  }
  replies = vim.lsp.buf_request_sync(buf, "textDocument/codeAction", ca_params, 30000)
  local titles = {}
  local fix
  for _, r in pairs(replies or {}) do
    for _, action in ipairs(r.result or {}) do
      table.insert(titles, action.title)
      if action.isPreferred then fix = action end
    end
  end
  if not fix or not fix.title:find("reshape", 1, true) then
    return fail(8, "no reshape quick fix; got: " .. table.concat(titles, " | "))
  end
  local has_suppress = false
  for _, t in ipairs(titles) do
    if t == "Suppress SL101 on this line" then has_suppress = true end
  end
  if not has_suppress then return fail(9, "no suppress action; got: " .. table.concat(titles, " | ")) end

  -- Apply the quick fix in the buffer: the SL101 diagnostic must go away.
  vim.lsp.util.apply_workspace_edit(fix.edit, enc)
  local gone = vim.wait(60000, function()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.code == "SL101" then return false end
    end
    return true
  end, 100)
  if not gone then return fail(10, "SL101 still reported after the quick fix") end
  local fixed = vim.api.nvim_buf_get_lines(buf, sl101.lnum, sl101.lnum + 1, false)[1]
  if not fixed:find("xt.reshape(-1)", 1, true) then return fail(11, "fix applied wrongly: " .. fixed) end

  vim.lsp.stop_client(client_id)
  vim.wait(5000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
  io.stdout:write("nvim-session: ok\n")
  vim.cmd("qall!")
end

local ok, err = xpcall(main, debug.traceback)
if not ok then fail(1, tostring(err)) end
