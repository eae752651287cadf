"""The core contract: spaces, history, tools, parsing, rubric, noise, ToolEnv."""
