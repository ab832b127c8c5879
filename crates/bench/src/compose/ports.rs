//! A service's `ports`, short (`"8080:80"`, `"80"`, `"127.0.0.1:8080:80/udp"`, ranges)
//! and long syntax. Every port is published on the host's loopback address only: a
//! task's service must never be reachable from the host's network, so another address
//! asked for is replaced, with a notice.

use serde_yaml::Value;

use super::service::Found;
use super::{Bad, PublishedPort, TaskError};

/// The most ports one entry may publish (a range is expanded).
const MAX_RANGE: u32 = 1000;

/// Parses `ports`.
pub(super) fn parse_ports(
    v: Option<&Value>,
    service: &str,
    found: &mut Found,
    bad: Bad,
) -> Result<Vec<PublishedPort>, TaskError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => return Err(bad("ports", "expected a list")),
    };
    let mut out = Vec::new();
    for item in items {
        let (ip, ports) = match item {
            Value::Number(n) => (String::new(), short(&n.to_string())),
            Value::String(s) => (split_ip(s).0.to_string(), short(s)),
            Value::Mapping(_) => long(item),
            _ => (String::new(), Err("each entry is a string, a number or a mapping".to_string())),
        };
        let shown = serde_yaml::to_string(item).unwrap_or_default().trim().replace('\n', ", ");
        let ports = ports.map_err(|r| bad("ports", &format!("`{shown}`: {r}")))?;
        if !ip.is_empty() && !is_loopback(&ip) {
            found.notes.push(format!(
                "services.{service}.ports: `{shown}` is published on {} only, not on {ip}",
                agent_sandbox::PUBLISH_ADDRESS
            ));
        }
        out.extend(ports);
    }
    Ok(out)
}

fn is_loopback(ip: &str) -> bool {
    matches!(ip.trim_matches(['[', ']']), "127.0.0.1" | "localhost" | "::1")
}

/// The address part of a short entry (`IP:HOST:CONTAINER`, IPv6 in brackets) and the rest.
fn split_ip(s: &str) -> (&str, &str) {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((ip, after)) = rest.split_once("]:") {
            return (ip, after);
        }
    }
    match s.matches(':').count() {
        2 => s.split_once(':').unwrap_or(("", s)),
        _ => ("", s),
    }
}

/// `[IP:][HOST:]CONTAINER[/PROTOCOL]`, each port possibly a range `A-B`.
fn short(s: &str) -> Result<Vec<PublishedPort>, String> {
    let (spec, protocol) = s.trim().split_once('/').unwrap_or((s.trim(), "tcp"));
    let (_, rest) = split_ip(spec);
    let (host, container) = match rest.rsplit_once(':') {
        Some((host, container)) => (Some(host), container),
        None => (None, rest),
    };
    expand(host.filter(|h| !h.is_empty()), container, protocol)
}

/// `target`, `published`, `host_ip`, `protocol` (`mode` and `name` are Swarm's).
fn long(item: &Value) -> (String, Result<Vec<PublishedPort>, String>) {
    let text = |k: &str| match item.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let ip = text("host_ip").unwrap_or_default();
    let Some(target) = text("target") else { return (ip, Err("a long-syntax entry needs `target`".into())) };
    let protocol = text("protocol").unwrap_or_else(|| "tcp".into());
    let published = text("published").filter(|p| !p.is_empty());
    (ip, expand(published.as_deref(), &target, &protocol))
}

/// Pairs host and container ports (ranges of one length pair up; a host range for one
/// container port takes its first port; no host port means an ephemeral one).
fn expand(host: Option<&str>, container: &str, protocol: &str) -> Result<Vec<PublishedPort>, String> {
    let protocol = protocol.to_ascii_lowercase();
    if !matches!(protocol.as_str(), "tcp" | "udp" | "sctp") {
        return Err(format!("unknown protocol `{protocol}` (use tcp, udp or sctp)"));
    }
    let (c0, c1) = range(container)?;
    let hosts = host.map(range).transpose()?;
    let n = u32::from(c1 - c0) + 1;
    if n > MAX_RANGE {
        return Err(format!("a range of more than {MAX_RANGE} ports"));
    }
    if let Some((h0, h1)) = hosts {
        let hn = u32::from(h1 - h0) + 1;
        if hn != n && n != 1 {
            return Err(format!("the host range has {hn} ports and the container range {n}"));
        }
    }
    Ok((0..n)
        .map(|i| {
            let i = i as u16;
            PublishedPort { container_port: c0 + i, host_port: hosts.map(|(h0, _)| h0 + i), protocol: protocol.clone() }
        })
        .collect())
}

/// `A` or `A-B` (A ≤ B), ports 1–65535.
fn range(s: &str) -> Result<(u16, u16), String> {
    let port = |p: &str| match p.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{}` is not a port number", p.trim())),
    };
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (port(a)?, port(b)?);
            if a > b {
                return Err(format!("the range `{s}` runs backwards"));
            }
            Ok((a, b))
        }
        None => port(s).map(|p| (p, p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(container: u16, host: Option<u16>) -> PublishedPort {
        PublishedPort { container_port: container, host_port: host, protocol: "tcp".into() }
    }

    fn parse(yaml: &str) -> (Result<Vec<PublishedPort>, TaskError>, Vec<String>) {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut found = Found::default();
        let bad = |f: &str, r: &str| TaskError::BadField { path: "dc.yaml".into(), field: f.into(), reason: r.into() };
        let r = parse_ports(Some(&v), "db", &mut found, &bad);
        (r, found.notes)
    }

    #[test]
    fn short_forms() {
        let (r, notes) = parse(r#"["8080:80", "80", 9000, "127.0.0.1:5432:5432", "53:53/udp", "[::1]:8443:443"]"#);
        let mut udp = p(53, Some(53));
        udp.protocol = "udp".into();
        assert_eq!(
            r.unwrap(),
            [p(80, Some(8080)), p(80, None), p(9000, None), p(5432, Some(5432)), udp, p(443, Some(8443))]
        );
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn ranges_and_the_long_syntax() {
        let (r, _) = parse(r#"["9000-9001:8000-8001", "7000-7010:70", "3000-3001"]"#);
        assert_eq!(
            r.unwrap(),
            [p(8000, Some(9000)), p(8001, Some(9001)), p(70, Some(7000)), p(3000, None), p(3001, None)]
        );
        let (r, _) = parse("- target: 80\n  published: \"8081\"\n  protocol: tcp\n- target: 81\n");
        assert_eq!(r.unwrap(), [p(80, Some(8081)), p(81, None)]);
    }

    #[test]
    fn other_addresses_become_loopback_with_a_notice_and_nonsense_is_refused() {
        let (r, notes) = parse(r#"["0.0.0.0:8080:80"]"#);
        assert_eq!(r.unwrap(), [p(80, Some(8080))]);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("127.0.0.1 only, not on 0.0.0.0"), "{notes:?}");
        let (r, notes) = parse("- target: 80\n  host_ip: 0.0.0.0\n");
        assert!(r.is_ok() && notes.len() == 1);
        for bad in [r#"["http"]"#, r#"["70000"]"#, r#"["80/icmp"]"#, r#"["9000-9002:80-81"]"#, "- published: 80\n"] {
            let e = parse(bad).0.unwrap_err().to_string();
            assert!(e.contains("services") || e.contains("ports"), "{bad}: {e}");
        }
    }
}
