-- sbpc for Neovim: the .sbp file type and the `sbpc lsp` language server (docs/editors.md).
-- Put this file in ~/.config/nvim/plugin/ (or require it from init.lua). Neovim 0.11 or later.
vim.filetype.add({ extension = { sbp = "sbp" } })

vim.api.nvim_create_autocmd("FileType", {
  pattern = "sbp",
  callback = function()
    vim.bo.commentstring = "# %s"
    vim.bo.shiftwidth = 2
    vim.bo.expandtab = true
  end,
})

vim.lsp.config("sbpc", {
  cmd = { "sbpc", "lsp" }, -- a full path when sbpc is not on PATH, such as { "/path/to/.venv/bin/sbpc", "lsp" }
  filetypes = { "sbp" },
  root_markers = { ".git" },
})
vim.lsp.enable("sbpc")

-- Format on save through the server (it runs `sbpc fmt`):
vim.api.nvim_create_autocmd("BufWritePre", {
  pattern = "*.sbp",
  callback = function(args)
    vim.lsp.buf.format({ bufnr = args.buf, name = "sbpc" })
  end,
})
