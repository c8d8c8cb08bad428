"""What reads and rewrites a pipeline's text for people and their tools: the formatter (fmt.py), write-back of
optimized prompts (writeback.py), the editor's answers (editor.py) and the emitters of `sbpc compile` (emit.py)."""
