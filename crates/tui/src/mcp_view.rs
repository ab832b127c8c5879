//! What `/mcp` shows: each server, how it is reached, its state and its tools.

use agent_core::mcp::McpServerStatus;

/// The `/mcp` text.
pub fn describe(servers: &[McpServerStatus]) -> String {
    if servers.is_empty() {
        return "no MCP servers: add `[mcp_servers.NAME]` to the config, or a `.mcp.json` to the project".into();
    }
    let mut out = format!("MCP servers ({}):", servers.len());
    for s in servers {
        out.push_str(&format!("\n  {} · {} · {}", s.name, s.transport, s.state));
        match s.tools.len() {
            0 => {}
            n => out.push_str(&format!("\n    {n} tool{}: {}", if n == 1 { "" } else { "s" }, s.tools.join(", "))),
        }
    }
    out
}
