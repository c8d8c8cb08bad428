"""Text -> IR: a file read (source.py), parsed in its syntax (parser.py for .sbp, yaml_form.py for YAML), and the
text's statements and comments as written (tokens.py), which the tools that rewrite it read."""
