// Starts `sbpc lsp` for .sbp files: diagnostics, hover, definition, references, rename, completion,
// outline and formatting all come from the server (docs/editors.md).
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration("sbpc").get("path", "sbpc");
  client = new LanguageClient(
    "sbpc",
    "sbpc language server",
    { command, args: ["lsp"] },
    { documentSelector: [{ scheme: "file", language: "sbp" }, { scheme: "untitled", language: "sbp" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
