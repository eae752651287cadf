"""The core contract: spaces, history, tools, parsing, rubric, noise, the typed step info, ToolEnv."""
