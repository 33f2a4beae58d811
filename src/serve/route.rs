//! Connection ids that a proxy's consistent hash sends back to the process that made them.
//!
//! Several `serve` processes sit behind nginx with `hash $http_acp_connection_id consistent`:
//! the `initialize` POST carries no id (nginx then picks a process round-robin), and every later
//! request must reach the process that holds the connection. So each process draws random ids
//! until nginx's hash ring maps one to itself (`--route-peers`, `--route-self`). The ring is
//! nginx's (ngx_http_upstream_hash_module, compatible with Cache::Memcached::Fast): for each
//! upstream server `HOST:PORT`, 160 points per weight, point *n* =
//! crc32(HOST "\0" PORT prev_hash_le); a key goes to the first point at or above crc32(key).

/// The ring: (point, index of the peer), sorted.
pub struct Ring {
    points: Vec<(u32, usize)>,
    peers: Vec<String>,
    me: usize,
}

impl Ring {
    /// `peers`: the upstream servers as nginx's `upstream` block names them (weight 1 each);
    /// `me`: which of them this process is.
    pub fn new(peers: &[String], me: &str) -> Result<Ring, String> {
        let Some(me) = peers.iter().position(|p| p == me) else {
            return Err(format!(
                "--route-self {me} is not one of --route-peers ({})",
                peers.join(",")
            ));
        };
        let mut points = Vec::with_capacity(peers.len() * 160);
        for (i, server) in peers.iter().enumerate() {
            let (host, port) = split_host_port(server);
            let mut base = Vec::with_capacity(host.len() + 1 + port.len());
            base.extend_from_slice(host.as_bytes());
            base.push(0);
            base.extend_from_slice(port.as_bytes());
            let mut prev: u32 = 0;
            for _ in 0..160 {
                let mut data = base.clone();
                data.extend_from_slice(&prev.to_le_bytes());
                let point = crc32(&data);
                points.push((point, i));
                prev = point;
            }
        }
        points.sort_unstable();
        points.dedup_by_key(|p| p.0);
        Ok(Ring {
            points,
            peers: peers.to_vec(),
            me,
        })
    }

    /// The peer nginx sends `key` to.
    pub fn peer_of(&self, key: &str) -> &str {
        let hash = crc32(key.as_bytes());
        let at = self.points.partition_point(|p| p.0 < hash) % self.points.len();
        &self.peers[self.points[at].1]
    }

    /// Whether nginx sends `key` to this process.
    pub fn is_mine(&self, key: &str) -> bool {
        self.peer_of(key) == self.peers[self.me]
    }
}

/// nginx's split: the port is the digits after the last `:`, if that is all digits.
fn split_host_port(server: &str) -> (&str, &str) {
    match server.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, port)
        }
        _ => (server, ""),
    }
}

/// CRC-32 (IEEE 802.3, reflected), as nginx's `ngx_crc32_long`.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_ieee_one() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn every_key_has_one_peer_and_they_share_the_keys() {
        let peers = vec!["127.0.0.1:8431".to_string(), "127.0.0.1:8432".to_string()];
        let a = Ring::new(&peers, "127.0.0.1:8431").unwrap();
        let b = Ring::new(&peers, "127.0.0.1:8432").unwrap();
        let keys: Vec<String> = (0..1000).map(|i| format!("{i:040x}")).collect();
        let mine = keys.iter().filter(|k| a.is_mine(k)).count();
        assert_eq!(mine + keys.iter().filter(|k| b.is_mine(k)).count(), 1000);
        assert!((300..700).contains(&mine), "{mine}");
        assert!(Ring::new(&peers, "127.0.0.1:9999").is_err());
        assert_eq!(split_host_port("10.0.0.1:80"), ("10.0.0.1", "80"));
        assert_eq!(split_host_port("backend"), ("backend", ""));
    }
}
