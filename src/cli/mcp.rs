//! The MCP servers of a session in a project: the config's `[mcp_servers]` and the
//! project's `.mcp.json` (a name in both: the config's entry is used).

use std::collections::BTreeMap;
use std::path::Path;

use agent_core::config::Config;
use agent_core::mcp::{read_mcp_json, McpServerConfig};

/// The servers to start for a session in `project`.
pub fn project_servers(config: &Config, project: &Path) -> anyhow::Result<BTreeMap<String, McpServerConfig>> {
    let mut servers = read_mcp_json(project)?;
    servers.extend(config.mcp_servers.clone());
    Ok(servers)
}
