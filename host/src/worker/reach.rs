//! Which addresses a destination may connect to. A tenant names its destination's URL,
//! and hookhost connects from inside the operator's network: unless the operator
//! allows it (`[tenancy] private_destinations = true`), a tenant's destination reaches
//! public addresses only, never loopback, private, link-local or other special ones
//! (the admin listener, a cloud metadata service, a database on the LAN).
//!
//! The check is made on the addresses a name resolves to, at each connection, and the
//! connection goes to one of the addresses checked: a name that resolves to a public
//! address when the endpoint is created and to a private one later is refused then.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which addresses a destination may connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reach {
    /// Any: an endpoint of the configuration file, or a tenant's when the operator
    /// allows private destinations.
    #[default]
    Any,
    /// Public unicast addresses only (see [`is_public`]).
    Public,
}

/// What a refusal says, after the address.
const REFUSED: &str = "a tenant's destination must be public (the operator allows \
                       private ones with [tenancy] private_destinations = true)";

/// Whether `ip` is a public unicast address: not unspecified, loopback, private,
/// shared (100.64/10), link-local, multicast, broadcast, documentation, benchmarking
/// (198.18/15), the IETF's protocol assignments (192.0.0/24: a cloud's legacy
/// metadata service has one) or reserved (IPv4 `0/8` and `240/4`); for IPv6 not
/// unique-local, site-local (`fec0::/10`), link-local, discard-only (`100::/64`) or
/// NAT64's local-use prefix (`64:ff9b:1::/48`, the network's own IPv4 space) or Teredo
/// (`2001::/32`, whose tunnel ends wherever its relay puts it) either, and an IPv4
/// address inside an IPv6 one (mapped, the deprecated compatible `::a.b.c.d`, which a
/// host with a `sit` tunnel sends as IPv4, NAT64's `64:ff9b::/96` or 6to4's
/// `2002::/16`) is judged as IPv4.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_public_v4(v4),
            None => {
                let s = v6.segments();
                !(v6.is_unspecified()
                    || v6.is_loopback()
                    || v6.is_multicast()
                    || v6.is_unique_local()
                    || v6.is_unicast_link_local()
                    // Site-local, fec0::/10.
                    || s[0] & 0xffc0 == 0xfec0
                    // Discard-only, 100::/64.
                    || s[..4] == [0x100, 0, 0, 0]
                    // NAT64 for local use, 64:ff9b:1::/48.
                    || s[..3] == [0x64, 0xff9b, 1]
                    // Documentation, 2001:db8::/32.
                    || s[..2] == [0x2001, 0x0db8]
                    // Teredo, 2001::/32.
                    || s[..2] == [0x2001, 0])
            }
        },
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    !(v4.is_unspecified()
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_multicast()
        || v4.is_broadcast()
        || v4.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b)))
}

/// The IPv4 address an IPv6 one carries: `::ffff:a.b.c.d`, `::a.b.c.d` (so `::1` and
/// `::` are judged as `0.0.0.1` and `0.0.0.0`, neither public), `64:ff9b::a.b.c.d` or
/// 6to4's `2002:aabb:ccdd::` (a.b.c.d at bits 16 to 48).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4() {
        return Some(v4);
    }
    let s = v6.segments();
    let o = v6.octets();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    (s[0] == 0x2002).then(|| Ipv4Addr::new(o[2], o[3], o[4], o[5]))
}

/// Why a destination URL's host is refused as written, if it is: an address that is
/// not public, or `localhost`. A name is judged when it is resolved
/// ([`public_addresses`]); this only gives the tenant its answer at once.
pub fn refused_host(host: &str) -> Option<String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let literal = bare.parse::<IpAddr>().ok();
    let local = bare.trim_end_matches('.').eq_ignore_ascii_case("localhost");
    (local || literal.is_some_and(|ip| !is_public(ip)))
        .then(|| format!("{host} is not a public address: {REFUSED}"))
}

/// The public addresses `address` (`host:port`) resolves to, in the resolver's order;
/// an error when it resolves to none.
pub async fn public_addresses(address: &str) -> Result<Vec<SocketAddr>, String> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(address)
        .await
        .map_err(|e| format!("resolve {address}: {e}"))?
        .collect();
    let public: Vec<SocketAddr> = resolved
        .iter()
        .copied()
        .filter(|a| is_public(a.ip()))
        .collect();
    match resolved.first() {
        _ if !public.is_empty() => Ok(public),
        Some(first) => Err(format!(
            "connect {address}: refused, it resolves to {} and no public address: {REFUSED}",
            first.ip()
        )),
        None => Err(format!("resolve {address}: no address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_are_public() {
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "::8.8.8.8",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.0",
        ] {
            let ip: IpAddr = public.parse().expect("address");
            assert!(is_public(ip), "{public}");
        }
        for special in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.9.9.9",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "192.0.0.192",
            "198.18.0.1",
            "198.19.255.255",
            "fec0::1",
            "feff::1",
            "100::1",
            "64:ff9b:1::a00:1",
            "2002:a00:1::1",
            "2002:7f00:1::1",
            "::127.0.0.1",
            "::a9fe:a9fe",
            "::10.0.0.1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            let ip: IpAddr = special.parse().expect("address");
            assert!(!is_public(ip), "{special}");
        }
    }

    #[test]
    fn hosts_written_as_local_addresses_are_refused() {
        for host in ["127.0.0.1", "[::1]", "localhost", "LOCALHOST.", "10.1.2.3"] {
            let reason = refused_host(host).unwrap_or_default();
            assert!(
                reason.starts_with(&format!("{host} is not a public address")),
                "{host}: {reason}"
            );
        }
        for host in ["hooks.example.com", "8.8.8.8", "[2606:4700:4700::1111]"] {
            assert_eq!(refused_host(host), None, "{host}");
        }
    }

    /// Names are judged by what they resolve to: the resolver's own forms of a
    /// loopback address (a bare number, `localhost`) are refused, a public literal
    /// passes. None of these needs a DNS server.
    #[tokio::test]
    async fn what_a_name_resolves_to_decides() {
        for address in ["localhost:9", "2130706433:9", "127.1:9", "[::1]:9"] {
            let refused = public_addresses(address).await.expect_err(address);
            assert!(
                refused.starts_with(&format!("connect {address}: refused, it resolves to ")),
                "{refused}"
            );
        }
        let public = public_addresses("8.8.8.8:443").await.expect("public");
        assert_eq!(public, ["8.8.8.8:443".parse::<SocketAddr>().expect("addr")]);
    }
}
