//! The firewall of a sandbox's network namespace as `iptables-restore` input: pure
//! functions of what the engine and the host report, so that every rule is unit-tested.
//!
//! Order matters (first match wins): loopback, replies, DNS to the resolvers and the
//! hosts the user allowed are accepted; the host's own addresses, the gateways and
//! link-local addresses are refused; the container's own networks (a task's services)
//! are accepted; private ranges and the host's LANs are refused; then the public
//! internet is accepted (`on`) or everything else refused (`allowlist`). Refusals are
//! a TCP reset or an ICMP error generated in the namespace: a connection fails at once
//! and no packet leaves.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The comment on every rule this module writes (what tests and people grep for).
pub const TAG: &str = "agent-egress";

/// The chain every refusal jumps to.
const REJECT_CHAIN: &str = "AGENT-REJECT";

/// IPv4 blocks never reached unless allowed: private, shared, reserved and multicast.
const PRIVATE_V4: [(&str, &str); 10] = [
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "shared address space"),
    ("0.0.0.0/8", "this network"),
    ("192.0.0.0/24", "protocol assignments"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("127.0.0.0/8", "loopback off lo"),
];

/// IPv6 blocks never reached unless allowed (unique local, multicast, and the
/// translation prefixes that can carry a private IPv4 address).
const PRIVATE_V6: [(&str, &str); 7] = [
    ("fc00::/7", "unique local"),
    ("ff00::/8", "multicast"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "NAT64"),
    ("2002::/16", "6to4"),
    ("2001::/32", "Teredo"),
    ("::ffff:0:0/96", "IPv4-mapped"),
];

/// An address block; a single address is a `/32` or `/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `prefix` bits holding `addr` (bits beyond the prefix cleared).
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let prefix_ok = match addr {
            IpAddr::V4(_) => prefix <= 32,
            IpAddr::V6(_) => prefix <= 128,
        };
        prefix_ok.then(|| Cidr { addr: mask(addr, prefix), prefix })
    }

    /// One address.
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, prefix: if addr.is_ipv4() { 32 } else { 128 } }
    }

    /// `a.b.c.d/n`, `x::/n`, or an address alone.
    pub fn parse(s: &str) -> Option<Cidr> {
        match s.split_once('/') {
            Some((a, p)) => Cidr::new(a.parse().ok()?, p.parse().ok()?),
            None => Some(Cidr::host(s.parse().ok()?)),
        }
    }

    /// Whether this is an IPv4 block.
    pub fn is_v4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The first address after the network's own (where Docker puts a gateway).
    pub fn first_host(&self) -> Option<IpAddr> {
        match self.addr {
            IpAddr::V4(a) if self.prefix < 31 => Some(IpAddr::V4(Ipv4Addr::from(u32::from(a) + 1))),
            IpAddr::V6(a) if self.prefix < 127 => Some(IpAddr::V6(Ipv6Addr::from(u128::from(a) + 1))),
            _ => None,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// An `allow_hosts` entry as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowEntry {
    /// An address or block, on one port or all.
    Block { cidr: Cidr, port: Option<u16> },
    /// A host name, resolved on this computer when the sandbox starts.
    Name { host: String, port: Option<u16> },
}

/// Parses `host`, `host:port`, `1.2.3.4`, `1.2.3.4:443`, `10.0.0.0/8`, `::1`,
/// `[::1]:443`; the reason when it is none of them.
pub fn parse_allow(entry: &str) -> Result<AllowEntry, String> {
    let s = entry.trim();
    if s.is_empty() {
        return Err("an empty entry".into());
    }
    if s.contains("://") || s.contains('@') || s.contains('\\') {
        return Err("write a host name, address or block, not a URL".into());
    }
    let port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("`{p}` is not a port (1 to 65535)")),
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, tail) = rest.split_once(']').ok_or("an unclosed `[`")?;
        let addr: Ipv6Addr = addr.parse().map_err(|_| format!("`{addr}` is not an IPv6 address"))?;
        let port = match tail {
            "" => None,
            t => port(t.strip_prefix(':').ok_or("expected `:PORT` after `]`")?)?,
        };
        return Ok(AllowEntry::Block { cidr: Cidr::host(IpAddr::V6(addr)), port });
    }
    if s.contains('/') {
        let cidr = Cidr::parse(s).ok_or_else(|| format!("`{s}` is not an address block (like 10.1.0.0/16)"))?;
        return Ok(AllowEntry::Block { cidr, port: None });
    }
    if let Ok(addr) = s.parse::<IpAddr>() {
        return Ok(AllowEntry::Block { cidr: Cidr::host(addr), port: None });
    }
    let (host, port) = match s.split_once(':') {
        Some((h, p)) if !p.contains(':') => (h, port(p)?),
        Some(_) => return Err("an IPv6 address with a port is written `[ADDR]:PORT`".into()),
        None => (s, None),
    };
    if let Ok(addr) = host.parse::<Ipv4Addr>() {
        return Ok(AllowEntry::Block { cidr: Cidr::host(IpAddr::V4(addr)), port });
    }
    let valid = host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !valid {
        return Err(format!("`{host}` is not a host name"));
    }
    Ok(AllowEntry::Name { host: host.to_ascii_lowercase(), port })
}

/// A destination the user allowed, after its name was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub dest: Cidr,
    pub port: Option<u16>,
}

/// Everything the rules are made of.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Only `allowed` beyond DNS, loopback and the container's networks (`allowlist`).
    pub only_allowed: bool,
    /// Destinations reachable even where the policy refuses (private, host, link-local).
    pub allowed: Vec<Allowed>,
    /// DNS servers (port 53 only).
    pub resolvers: Vec<IpAddr>,
    /// DNS on port 53 to any address: the container's DNS is Docker's embedded server,
    /// which forwards from this namespace to upstreams the host could not name.
    pub dns_anywhere: bool,
    /// The container's own networks (a task's services talk to each other there).
    pub own: Vec<Cidr>,
    /// The host's addresses and the networks' gateways: the host's own services.
    pub host: Vec<IpAddr>,
    /// Networks the host is directly attached to (its LANs).
    pub lans: Vec<Cidr>,
}

/// `iptables-restore` input for IPv4.
pub fn rules_v4(i: &Inputs) -> String {
    build(i, true)
}

/// `ip6tables-restore` input for IPv6.
pub fn rules_v6(i: &Inputs) -> String {
    build(i, false)
}

fn build(i: &Inputs, v4: bool) -> String {
    let fam = |c: &Cidr| c.is_v4() == v4;
    let mut out = String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    out.push_str(&format!(":{REJECT_CHAIN} - [0:0]\n"));
    let unreachable = if v4 { "icmp-port-unreachable" } else { "icmp6-port-unreachable" };
    out.push_str(&format!("-A {REJECT_CHAIN} -p tcp -j REJECT --reject-with tcp-reset\n"));
    out.push_str(&format!("-A {REJECT_CHAIN} -j REJECT --reject-with {unreachable}\n"));
    let mut rule = |matches: &str, why: &str, target: &str| {
        out.push_str(&format!("-A OUTPUT {matches} -m comment --comment \"{TAG}: {why}\" -j {target}\n"));
    };
    let reject = REJECT_CHAIN;
    rule("-o lo", "loopback", "ACCEPT");
    rule("-m conntrack --ctstate ESTABLISHED,RELATED", "replies", "ACCEPT");
    if !v4 {
        // Without neighbour discovery no IPv6 packet leaves at all.
        for t in ["neighbour-solicitation", "neighbour-advertisement", "router-solicitation"] {
            rule(&format!("-p ipv6-icmp --icmpv6-type {t}"), "neighbour discovery", "ACCEPT");
        }
    }
    for proto in ["udp", "tcp"] {
        if i.dns_anywhere {
            rule(&format!("-p {proto} --dport 53"), "dns", "ACCEPT");
        }
        for r in i.resolvers.iter().map(|r| Cidr::host(*r)).filter(fam) {
            rule(&format!("-d {r} -p {proto} --dport 53"), "dns", "ACCEPT");
        }
    }
    for a in i.allowed.iter().filter(|a| fam(&a.dest)) {
        match a.port {
            Some(p) => {
                for proto in ["tcp", "udp"] {
                    rule(&format!("-d {} -p {proto} --dport {p}", a.dest), "allowed", "ACCEPT");
                }
            }
            None => rule(&format!("-d {}", a.dest), "allowed", "ACCEPT"),
        }
    }
    for h in i.host.iter().map(|h| Cidr::host(*h)).filter(fam) {
        rule(&format!("-d {h}"), "host", reject);
    }
    let link_local = if v4 { "169.254.0.0/16" } else { "fe80::/10" };
    rule(&format!("-d {link_local}"), "link-local (cloud metadata)", reject);
    for c in i.own.iter().filter(|c| fam(c)) {
        rule(&format!("-d {c}"), "own network", "ACCEPT");
    }
    let private: &[(&str, &str)] = if v4 { &PRIVATE_V4 } else { &PRIVATE_V6 };
    for (block, why) in private {
        rule(&format!("-d {block}"), why, reject);
    }
    for c in i.lans.iter().filter(|c| fam(c)) {
        rule(&format!("-d {c}"), "host LAN", reject);
    }
    match (i.only_allowed, v4) {
        (true, _) => rule("", "not allowed", reject),
        (false, true) => rule("", "internet", "ACCEPT"),
        (false, false) => {
            rule("-d 2000::/3", "internet", "ACCEPT");
            rule("", "not global", reject);
        }
    }
    out.push_str("COMMIT\n");
    out
}

/// What the host reports about itself, from a helper on its network namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostNet {
    /// Its own addresses.
    pub addrs: Vec<IpAddr>,
    /// Its directly attached networks.
    pub lans: Vec<Cidr>,
    /// Its DNS servers (loopback ones left out).
    pub resolvers: Vec<IpAddr>,
}

/// Separates the sections of the host helper's output.
pub const SECTION: &str = "--agent-egress-section--";

/// Parses the host helper's output: `/proc/net/fib_trie`, `/proc/net/route`,
/// `/proc/net/if_inet6`, `/proc/net/ipv6_route` and `/etc/resolv.conf`, in that order.
pub fn parse_host(text: &str) -> HostNet {
    let mut parts = text.split(SECTION);
    let (trie, route, inet6, route6, resolv) = (parts.next(), parts.next(), parts.next(), parts.next(), parts.next());
    let mut net = HostNet::default();
    // fib_trie names every local address on a line before `/32 host LOCAL`.
    let mut last: Option<Ipv4Addr> = None;
    for line in trie.unwrap_or_default().lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ").and_then(|a| a.parse().ok()) {
            last = Some(a);
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last {
                push_unique(&mut net.addrs, IpAddr::V4(a));
            }
        }
    }
    for line in route.unwrap_or_default().lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dest), Some(gw), Some(m)) = (f.get(1), f.get(2), f.get(7)) else { continue };
        let (Ok(dest), Ok(gw), Ok(m)) =
            (u32::from_str_radix(dest, 16), u32::from_str_radix(gw, 16), u32::from_str_radix(m, 16))
        else {
            continue;
        };
        // The kernel prints these in host (little-endian) byte order.
        let (dest, m) = (Ipv4Addr::from(dest.swap_bytes()), u32::from(Ipv4Addr::from(m.swap_bytes())));
        if gw == 0 && m != 0 && f.first() != Some(&"lo") {
            if let Some(c) = Cidr::new(IpAddr::V4(dest), m.count_ones() as u8) {
                push_unique(&mut net.lans, c);
            }
        }
    }
    for line in inet6.unwrap_or_default().lines() {
        if let Some(a) = line.split_whitespace().next().and_then(hex_v6) {
            if !a.is_loopback() {
                push_unique(&mut net.addrs, IpAddr::V6(a));
            }
        }
    }
    for line in route6.unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dest), Some(plen), Some(hop), Some(dev)) = (f.first(), f.get(1), f.get(4), f.get(9)) else {
            continue;
        };
        let (Some(dest), Ok(plen), Some(hop)) = (hex_v6(dest), u8::from_str_radix(plen, 16), hex_v6(hop)) else {
            continue;
        };
        let special = dest.segments()[0] & 0xffc0 == 0xfe80 || dest.segments()[0] & 0xff00 == 0xff00;
        if hop.is_unspecified() && plen > 0 && plen < 128 && *dev != "lo" && !special {
            if let Some(c) = Cidr::new(IpAddr::V6(dest), plen) {
                push_unique(&mut net.lans, c);
            }
        }
    }
    net.resolvers = parse_resolvers(resolv.unwrap_or_default()).into_iter().filter(|r| !r.is_loopback()).collect();
    net
}

/// The `nameserver` addresses of a `resolv.conf`.
pub fn parse_resolvers(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() == Some("nameserver") {
            // A zone index (`fe80::1%eth0`) cannot be written in a rule.
            if let Some(a) = f.next().and_then(|a| a.split('%').next()).and_then(|a| a.parse().ok()) {
                push_unique(&mut out, a);
            }
        }
    }
    out
}

fn hex_v6(s: &str) -> Option<Ipv6Addr> {
    (s.len() == 32).then(|| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from)).flatten()
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The rules matching `dest` in order, as (comment, target), up to the first
    /// terminal one (what the kernel would do with a packet to `dest` on `port`).
    fn verdict(rules: &str, dest: &str, port: u16) -> String {
        let dest = ip(dest);
        for line in rules.lines().filter(|l| l.starts_with("-A OUTPUT")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let arg = |k: &str| words.iter().position(|w| *w == k).map(|i| words[i + 1]);
            if arg("-o").is_some() || arg("--ctstate").is_some() || arg("--icmpv6-type").is_some() {
                continue;
            }
            if let Some(d) = arg("-d") {
                let c = Cidr::parse(d).unwrap();
                if Cidr::new(dest, c.prefix) != Some(c) {
                    continue;
                }
            }
            if arg("--dport").is_some_and(|p| p.parse::<u16>().unwrap() != port) {
                continue;
            }
            return arg("-j").unwrap().to_string();
        }
        "ACCEPT (policy)".into()
    }

    fn bridge() -> Inputs {
        Inputs {
            resolvers: vec![ip("10.255.255.53")],
            own: vec![Cidr::parse("172.17.0.0/16").unwrap()],
            host: vec![ip("172.17.0.1"), ip("192.0.2.2")],
            lans: vec![Cidr::parse("192.0.2.0/24").unwrap()],
            ..Default::default()
        }
    }

    #[test]
    fn the_default_policy_refuses_metadata_host_and_lan_and_accepts_the_internet_and_dns() {
        let r = rules_v4(&bridge());
        assert_eq!(verdict(&r, "169.254.169.254", 80), REJECT_CHAIN);
        assert_eq!(verdict(&r, "172.17.0.1", 8080), REJECT_CHAIN, "the bridge gateway is the host");
        assert_eq!(verdict(&r, "192.0.2.2", 22), REJECT_CHAIN, "another host address");
        assert_eq!(verdict(&r, "192.0.2.7", 80), REJECT_CHAIN, "the host's LAN");
        for lan in ["10.1.2.3", "172.20.0.5", "192.168.1.1", "100.64.0.1", "224.0.0.251"] {
            assert_eq!(verdict(&r, lan, 80), REJECT_CHAIN, "{lan}");
        }
        assert_eq!(verdict(&r, "172.17.0.3", 5432), "ACCEPT", "a neighbour on its own network");
        assert_eq!(verdict(&r, "10.255.255.53", 53), "ACCEPT", "its resolver");
        assert_eq!(verdict(&r, "10.255.255.53", 80), REJECT_CHAIN, "only DNS on the resolver");
        assert_eq!(verdict(&r, "151.101.0.223", 443), "ACCEPT");
        assert!(r.contains("-o lo") && r.contains("ESTABLISHED") && r.ends_with("COMMIT\n"));
    }

    #[test]
    fn an_allowlist_accepts_exactly_what_it_names_even_on_the_host() {
        let mut i = bridge();
        i.only_allowed = true;
        i.allowed = vec![
            Allowed { dest: Cidr::host(ip("172.17.0.1")), port: Some(8001) },
            Allowed { dest: Cidr::parse("151.101.0.0/16").unwrap(), port: None },
        ];
        let r = rules_v4(&i);
        assert_eq!(verdict(&r, "172.17.0.1", 8001), "ACCEPT");
        assert_eq!(verdict(&r, "172.17.0.1", 8002), REJECT_CHAIN);
        assert_eq!(verdict(&r, "151.101.9.9", 443), "ACCEPT");
        assert_eq!(verdict(&r, "140.82.112.3", 443), REJECT_CHAIN, "not listed");
        assert_eq!(verdict(&r, "169.254.169.254", 80), REJECT_CHAIN);
        assert_eq!(verdict(&r, "172.17.0.9", 80), "ACCEPT", "its own network still");
        assert_eq!(verdict(&r, "10.255.255.53", 53), "ACCEPT", "DNS still");
    }

    #[test]
    fn ipv6_keeps_neighbour_discovery_and_refuses_link_local_and_unique_local() {
        let r = rules_v6(&Inputs { host: vec![ip("2001:db8::2")], ..bridge() });
        assert!(r.contains("neighbour-solicitation"));
        assert_eq!(verdict(&r, "fe80::1", 80), REJECT_CHAIN);
        assert_eq!(verdict(&r, "fd00::1", 80), REJECT_CHAIN);
        assert_eq!(verdict(&r, "64:ff9b::a9fe:a9fe", 80), REJECT_CHAIN, "NAT64 of the metadata address");
        assert_eq!(verdict(&r, "2001:db8::2", 80), REJECT_CHAIN, "a host address");
        assert_eq!(verdict(&r, "2606:4700::1", 443), "ACCEPT");
        assert!(!r.contains("10.255.255.53"), "no IPv4 address in IPv6 rules");
    }

    #[test]
    fn allow_entries_parse_names_ports_addresses_and_blocks_and_refuse_urls() {
        let name = |h: &str, p| AllowEntry::Name { host: h.into(), port: p };
        assert_eq!(parse_allow("PyPI.org").unwrap(), name("pypi.org", None));
        assert_eq!(parse_allow("deb.debian.org:80").unwrap(), name("deb.debian.org", Some(80)));
        let block = |c: &str, port| AllowEntry::Block { cidr: Cidr::parse(c).unwrap(), port };
        assert_eq!(parse_allow("10.0.0.7").unwrap(), block("10.0.0.7/32", None));
        assert_eq!(parse_allow("10.0.0.7:3128").unwrap(), block("10.0.0.7/32", Some(3128)));
        assert_eq!(parse_allow("10.1.2.3/16").unwrap(), block("10.1.0.0/16", None));
        assert_eq!(parse_allow("[::1]:443").unwrap(), block("::1/128", Some(443)));
        assert_eq!(parse_allow("2001:db8::/32").unwrap(), block("2001:db8::/32", None));
        for bad in ["", "https://pypi.org", "a@b", "x:0", "x:99999", "host name", "1.2.3.4/40", "[::1", "a..b"] {
            assert!(parse_allow(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_host_helper_output_gives_addresses_lans_and_resolvers() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     \
                    |-- 192.0.2.2\n        /32 host LOCAL\n     |-- 192.0.2.255\n        /32 link BROADCAST\n     \
                    |-- 172.17.0.1\n        /32 host LOCAL\n";
        let route = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\n\
                     eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n\
                     docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\n";
        let inet6 = "00000000000000000000000000000001 01 80 10 80       lo\n\
                     20010db8000000000000000000000002 02 40 00 80     eth0\n";
        let route6 = "20010db8000000000000000000000000 40 00000000000000000000000000000000 00 \
                      00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                      fe800000000000000000000000000000 40 00000000000000000000000000000000 00 \
                      00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n";
        let resolv = "# generated\nnameserver 127.0.0.53\nnameserver 10.255.255.53\nsearch x\n";
        let text = [trie, route, inet6, route6, resolv].join(SECTION);
        let net = parse_host(&text);
        assert_eq!(net.addrs, vec![ip("192.0.2.2"), ip("172.17.0.1"), ip("2001:db8::2")]);
        let lans: Vec<String> = net.lans.iter().map(|c| c.to_string()).collect();
        assert_eq!(lans, ["192.0.2.0/24", "172.17.0.0/16", "2001:db8::/64"]);
        assert_eq!(net.resolvers, vec![ip("10.255.255.53")]);
    }

    #[test]
    fn blocks_are_masked_and_know_their_first_host() {
        let c = Cidr::new(ip("172.18.0.5"), 16).unwrap();
        assert_eq!(c.to_string(), "172.18.0.0/16");
        assert_eq!(c.first_host(), Some(ip("172.18.0.1")));
        assert_eq!(Cidr::new(ip("10.0.0.1"), 33), None);
        assert_eq!(Cidr::host(ip("::1")).to_string(), "::1/128");
    }
}
