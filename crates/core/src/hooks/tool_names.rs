//! The names and inputs a hook sees for a call, as Claude Code names its tools, so that
//! matchers written for it (`Bash`, `Edit|Write`, `mcp__.*`) work here unchanged.

use serde_json::{Map, Value};

/// The Claude Code name of a call: `bash` → `Bash`, a file write → `Write`, an MCP
/// tool `server__tool` → `mcp__server__tool`; other tools keep their own name.
pub fn claude_tool_name(tool: &str, args: &Map<String, Value>) -> String {
    let action = args.get("action").and_then(Value::as_str).unwrap_or_default();
    let name = match (tool, action) {
        ("bash", _) => "Bash",
        ("file", "write") => "Write",
        ("file", "edit") => "Edit",
        ("file", "multi_edit") => "MultiEdit",
        ("file", _) => "Read",
        ("search", "glob") => "Glob",
        ("search", "ls") => "LS",
        ("search", _) => "Grep",
        ("todo", _) => "TodoWrite",
        _ if tool.contains("__") => return format!("mcp__{tool}"),
        _ => tool,
    };
    name.to_string()
}

/// The call's arguments with Claude Code's keys added beside ours (`command` for
/// `cmd`, `file_path` for `path`), so that `jq .tool_input.command` works.
pub fn claude_tool_input(tool: &str, args: &Map<String, Value>, cwd: &str) -> Value {
    let mut input = args.clone();
    let mut alias = |from: &str, to: &str| {
        if let Some(v) = args.get(from) {
            input.entry(to.to_string()).or_insert_with(|| v.clone());
        }
    };
    match tool {
        "bash" => alias("cmd", "command"),
        "file" => {
            if let Some(path) = args.get("path").and_then(Value::as_str) {
                let full = agent_sandbox::resolve_path(cwd, path);
                input.entry("file_path".to_string()).or_insert(Value::String(full));
            }
        }
        _ => {}
    }
    Value::Object(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn our_tools_get_claude_codes_names_and_keys() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(claude_tool_name("bash", &args(json!({"cmd": "ls"}))), "Bash");
        assert_eq!(claude_tool_name("file", &args(json!({"action": "edit"}))), "Edit");
        assert_eq!(claude_tool_name("file", &args(json!({"action": "read"}))), "Read");
        assert_eq!(claude_tool_name("time__get_current_time", &Map::new()), "mcp__time__get_current_time");
        assert_eq!(claude_tool_name("finish", &Map::new()), "finish");
        let input = claude_tool_input("file", &args(json!({"action": "write", "path": "a.txt"})), "/app");
        assert_eq!(input["file_path"], "/app/a.txt");
        assert_eq!(input["path"], "a.txt");
        assert_eq!(claude_tool_input("bash", &args(json!({"cmd": "ls"})), "/")["command"], "ls");
    }
}
