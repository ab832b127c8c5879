//! `[sandbox] network`: off, on (the public internet, never the host, its LANs or
//! cloud metadata) or an allowlist of hosts; `true`/`false` still mean on/off.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How much network a sandbox gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkSetting {
    /// No network at all.
    Off,
    /// The public internet and DNS; the host, its LANs and link-local addresses refused.
    #[default]
    On,
    /// Only `allow_hosts` (with DNS and the container's own networks).
    Allowlist,
}

impl NetworkSetting {
    /// Whether the container gets a network at all.
    pub fn enabled(self) -> bool {
        self != NetworkSetting::Off
    }

    /// How open it is: off < allowlist < on (a project may only go down this order).
    fn openness(self) -> u8 {
        match self {
            NetworkSetting::Off => 0,
            NetworkSetting::Allowlist => 1,
            NetworkSetting::On => 2,
        }
    }

    /// Whether `self` reaches more than `other` (what only the user may choose).
    pub fn looser_than(self, other: NetworkSetting) -> bool {
        self.openness() > other.openness()
    }
}

/// Whether a project's `allow_hosts` names any host the user's does not (only the user
/// may open the firewall further; with `on` an entry opens the host or the LAN).
pub fn hosts_added(project: &[String], user: &[String]) -> Vec<String> {
    let norm = |h: &str| h.trim().to_ascii_lowercase();
    project.iter().filter(|p| !user.iter().any(|u| norm(u) == norm(p))).cloned().collect()
}

/// The `allow_hosts` entries that are not a host, address or block, with the reason.
pub fn bad_hosts(hosts: &[String]) -> Vec<String> {
    hosts
        .iter()
        .filter_map(|h| agent_sandbox::parse_allow(h).err().map(|why| format!("[sandbox] allow_hosts: `{h}`: {why}")))
        .collect()
}

impl fmt::Display for NetworkSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetworkSetting::Off => "off",
            NetworkSetting::On => "on",
            NetworkSetting::Allowlist => "allowlist",
        })
    }
}

impl Serialize for NetworkSetting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NetworkSetting::Off => s.serialize_bool(false),
            NetworkSetting::On => s.serialize_bool(true),
            NetworkSetting::Allowlist => s.serialize_str("allowlist"),
        }
    }
}

impl<'de> Deserialize<'de> for NetworkSetting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(NetworkSetting::On),
            Raw::Bool(false) => Ok(NetworkSetting::Off),
            Raw::Text(t) => match t.as_str() {
                "on" => Ok(NetworkSetting::On),
                "off" | "none" => Ok(NetworkSetting::Off),
                "allowlist" => Ok(NetworkSetting::Allowlist),
                other => Err(serde::de::Error::custom(format!(
                    "network = \"{other}\": use true, false, \"on\", \"off\" or \"allowlist\" (with allow_hosts)"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Serialize)]
    struct T {
        network: NetworkSetting,
    }

    fn parse(v: &str) -> Result<NetworkSetting, String> {
        toml::from_str::<T>(&format!("network = {v}")).map(|t| t.network).map_err(|e| e.to_string())
    }

    #[test]
    fn booleans_and_words_parse_and_anything_else_is_refused_with_the_choices() {
        assert_eq!(parse("true").unwrap(), NetworkSetting::On);
        assert_eq!(parse("false").unwrap(), NetworkSetting::Off);
        assert_eq!(parse("'on'").unwrap(), NetworkSetting::On);
        assert_eq!(parse("'off'").unwrap(), NetworkSetting::Off);
        assert_eq!(parse("'none'").unwrap(), NetworkSetting::Off);
        assert_eq!(parse("'allowlist'").unwrap(), NetworkSetting::Allowlist);
        let err = parse("'open'").unwrap_err();
        assert!(err.contains("allowlist") && err.contains("open"), "{err}");
        let back = toml::to_string(&T { network: NetworkSetting::Allowlist }).unwrap();
        assert_eq!(parse(back.trim().trim_start_matches("network = ")).unwrap(), NetworkSetting::Allowlist);
    }

    #[test]
    fn only_off_allowlist_on_is_the_loosening_order() {
        use NetworkSetting::*;
        assert!(On.looser_than(Allowlist) && Allowlist.looser_than(Off) && On.looser_than(Off));
        assert!(!Off.looser_than(Allowlist) && !Allowlist.looser_than(On) && !On.looser_than(On));
    }

    #[test]
    fn added_hosts_are_those_the_user_did_not_list() {
        let user = vec!["pypi.org".to_string()];
        assert!(hosts_added(&["PyPI.org".into()], &user).is_empty());
        assert_eq!(hosts_added(&["pypi.org".into(), "10.0.0.1".into()], &user), vec!["10.0.0.1".to_string()]);
        assert_eq!(bad_hosts(&["https://x".into(), "ok.example".into()]).len(), 1);
    }
}
