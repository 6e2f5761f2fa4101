//! Gossip over UDP with every datagram sealed: chitchat has no
//! authentication, so this transport puts the AEAD of sealed credentials
//! (XChaCha20-Poly1305, `crate::secrets`) around each datagram, under the
//! cluster's key and with the cluster's name as associated data. A datagram
//! that does not open (another key, another cluster, a changed byte, noise)
//! is dropped and counted; it never reaches chitchat.
//!
//! Replays: a replayed datagram opens, but carries versions of the members'
//! state that are no newer than what the receiver has, which chitchat
//! ignores.

use crate::secrets::DataKey;
use anyhow::Context;
use async_trait::async_trait;
use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use prometheus::IntCounter;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;
/// A message longer than this (chitchat fills a datagram to the brim, and
/// sealing adds 40 bytes) goes in pieces of this size, each sealed.
const PIECE: usize = 60_000;
/// At most this many pieces to a message.
const MAX_PIECES: usize = 8;
/// Pieces of a message not all come in this long are dropped.
const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(5);
/// At most one WARN line for rejected datagrams in this long.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The first byte of an opened datagram: a whole message, or a piece.
const WHOLE: u8 = 0;
const PART: u8 = 1;

/// Opens sealed sockets for chitchat.
pub struct SealedUdp {
    key: Arc<DataKey>,
    aad: Arc<[u8]>,
    rejected: IntCounter,
    /// Sealed bytes sent and received (what goes over the wire).
    sent: IntCounter,
    received: IntCounter,
}

impl SealedUdp {
    /// Datagrams sealed under `key` for the cluster `name`; those that do
    /// not open count in `rejected`.
    pub fn new(key: DataKey, name: &str, rejected: IntCounter) -> SealedUdp {
        SealedUdp {
            key: Arc::new(key),
            aad: aad(name).into(),
            rejected,
            sent: IntCounter::new("sent", "sent").expect("a valid counter"),
            received: IntCounter::new("received", "received").expect("a valid counter"),
        }
    }

    /// Count the sealed bytes sent and received in these counters.
    pub fn with_traffic(mut self, sent: IntCounter, received: IntCounter) -> SealedUdp {
        self.sent = sent;
        self.received = received;
        self
    }
}

/// What every datagram of the cluster `name` is sealed for.
fn aad(name: &str) -> Vec<u8> {
    format!("pollster-gossip-v1\0{name}").into_bytes()
}

#[async_trait]
impl Transport for SealedUdp {
    async fn open(&self, listen: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}/udp for gossip"))?;
        Ok(Box::new(SealedSocket {
            socket,
            key: self.key.clone(),
            aad: self.aad.clone(),
            rejected: self.rejected.clone(),
            sent: self.sent.clone(),
            received: self.received.clone(),
            buf: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            rng: crate::model::random::os(),
            warned: None,
            next_id: 0,
            pieces: Reassembly::default(),
        }))
    }
}

/// Pieces of one message, as they come.
struct Pieces {
    first: Instant,
    parts: Vec<Option<Vec<u8>>>,
}

/// Messages coming in pieces, by sender and message id.
#[derive(Default)]
struct Reassembly {
    pending: HashMap<(SocketAddr, u32), Pieces>,
}

/// An opened datagram's content for a message of `body`: one datagram, or
/// [`PIECE`]-sized pieces under the message id `id`. `None` when it would
/// take more than [`MAX_PIECES`].
fn frame(id: u32, body: &[u8]) -> Option<Vec<Vec<u8>>> {
    if body.len() < PIECE {
        let mut plain = Vec::with_capacity(body.len() + 1);
        plain.push(WHOLE);
        plain.extend_from_slice(body);
        return Some(vec![plain]);
    }
    let count = body.len().div_ceil(PIECE);
    if count > MAX_PIECES {
        return None;
    }
    let out = body
        .chunks(PIECE)
        .enumerate()
        .map(|(i, piece)| {
            let mut plain = Vec::with_capacity(piece.len() + 7);
            plain.push(PART);
            plain.extend_from_slice(&id.to_le_bytes());
            plain.push(i as u8);
            plain.push(count as u8);
            plain.extend_from_slice(piece);
            plain
        })
        .collect();
    Some(out)
}

impl Reassembly {
    /// A whole message from an opened datagram, once all its pieces came.
    fn take(&mut self, from: SocketAddr, plain: &[u8], now: Instant) -> Option<Vec<u8>> {
        match plain.first() {
            Some(&WHOLE) => Some(plain[1..].to_vec()),
            Some(&PART) if plain.len() > 7 => {
                let id = u32::from_le_bytes(plain[1..5].try_into().ok()?);
                let (index, count) = (usize::from(plain[5]), usize::from(plain[6]));
                if count == 0 || count > MAX_PIECES || index >= count {
                    return None;
                }
                self.pending
                    .retain(|_, p| now.duration_since(p.first) < REASSEMBLY_TIMEOUT);
                let entry = self.pending.entry((from, id)).or_insert_with(|| Pieces {
                    first: now,
                    parts: vec![None; count],
                });
                if entry.parts.len() != count {
                    return None;
                }
                entry.parts[index] = Some(plain[7..].to_vec());
                if entry.parts.iter().all(Option::is_some) {
                    let p = self.pending.remove(&(from, id))?;
                    return Some(p.parts.into_iter().flatten().flatten().collect());
                }
                None
            }
            _ => None,
        }
    }
}

struct SealedSocket {
    socket: tokio::net::UdpSocket,
    key: Arc<DataKey>,
    aad: Arc<[u8]>,
    rejected: IntCounter,
    sent: IntCounter,
    received: IntCounter,
    buf: Box<[u8]>,
    rng: rand::rand_core::UnwrapErr<crate::model::random::SysRng>,
    warned: Option<Instant>,
    next_id: u32,
    pieces: Reassembly,
}

impl SealedSocket {
    fn reject(&mut self, from: SocketAddr, why: &str) {
        self.rejected.inc();
        let now = Instant::now();
        if self.warned.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            self.warned = Some(now);
            tracing::warn!(
                from = %from,
                reason = why,
                "dropped a gossip datagram that does not open under the cluster's key (another key, another cluster name, or not Pollster); counted in pollster_cluster_packets_rejected_total"
            );
        }
    }

    async fn send_sealed(&mut self, to: SocketAddr, plain: &[u8]) -> anyhow::Result<()> {
        let sealed = self.key.seal_bytes(&mut self.rng, &self.aad, plain);
        self.socket
            .send_to(&sealed, to)
            .await
            .with_context(|| format!("sending gossip to {to}"))?;
        self.sent.inc_by(sealed.len() as u64);
        Ok(())
    }
}

#[async_trait]
impl Socket for SealedSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let body = msg.serialize_to_vec();
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let Some(datagrams) = frame(id, &body) else {
            anyhow::bail!("a gossip message of {} bytes is too long to send", body.len());
        };
        for plain in datagrams {
            self.send_sealed(to, &plain).await?;
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (n, from) = match self.socket.recv_from(&mut self.buf).await {
                Ok(r) => r,
                // An ICMP error of an earlier send (a member that is down).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e).context("receiving gossip"),
            };
            self.received.inc_by(n as u64);
            let Some(plain) = self.key.open_bytes(&self.aad, &self.buf[..n]) else {
                self.reject(from, "does not open");
                continue;
            };
            let Some(body) = self.pieces.take(from, &plain, Instant::now()) else {
                continue;
            };
            let mut cursor: &[u8] = &body;
            match ChitchatMessage::deserialize(&mut cursor) {
                Ok(msg) => return Ok((from, msg)),
                Err(_) => self.reject(from, "opens but is not gossip"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::DATAGRAM_OVERHEAD;

    fn counter() -> IntCounter {
        IntCounter::new("rejected", "rejected").unwrap()
    }

    fn envelope() -> ChitchatMessage {
        ChitchatMessage::BadCluster
    }

    #[tokio::test]
    async fn a_datagram_under_the_key_arrives_and_one_under_another_key_is_counted_and_dropped() {
        let key = DataKey::from_bytes([7; 32]);
        let (good_count, bad_count) = (counter(), counter());
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        let good = SealedUdp::new(key.clone(), "lab", good_count.clone());
        let to: SocketAddr = ([127, 0, 0, 1], free_udp_port()).into();
        let mut rx = good.open(to).await.unwrap();
        // Another key, then another cluster name, then plain noise: none
        // arrives, each is counted.
        let mut wrong_key = SealedUdp::new(DataKey::from_bytes([8; 32]), "lab", bad_count.clone())
            .open(any)
            .await
            .unwrap();
        wrong_key.send(to, envelope()).await.unwrap();
        let mut wrong_name = SealedUdp::new(key.clone(), "prod", bad_count.clone())
            .open(any)
            .await
            .unwrap();
        wrong_name.send(to, envelope()).await.unwrap();
        let noise = tokio::net::UdpSocket::bind(any).await.unwrap();
        noise.send_to(&[0u8; 80], to).await.unwrap();
        // Then a good one: it is the first to come out.
        let tx_addr: SocketAddr = ([127, 0, 0, 1], free_udp_port()).into();
        let tx_port = tx_addr.port();
        let mut tx = good.open(tx_addr).await.unwrap();
        tx.send(to, envelope()).await.unwrap();
        let (from, got) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the sealed datagram arrives")
            .unwrap();
        assert_eq!(got, envelope());
        assert_eq!(from.port(), tx_port);
        assert_eq!(
            good_count.get(),
            3,
            "the wrong key, the wrong name and the noise are counted"
        );
        assert_eq!(bad_count.get(), 0);
    }

    /// A UDP port free now on loopback (the socket that found it is closed).
    fn free_udp_port() -> u16 {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn a_message_too_long_for_one_datagram_goes_in_pieces_that_come_back_whole_in_any_order() {
        let body: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
        let mut pieces = frame(9, &body).unwrap();
        assert_eq!(pieces.len(), 3);
        assert!(
            pieces
                .iter()
                .all(|p| p.len() + crate::secrets::DATAGRAM_OVERHEAD <= MAX_DATAGRAM)
        );
        pieces.reverse();
        let (from, now) = (SocketAddr::from(([10, 0, 0, 1], 7946)), Instant::now());
        let mut r = Reassembly::default();
        assert_eq!(r.take(from, &pieces[0], now), None);
        assert_eq!(r.take(from, &pieces[1], now), None);
        // A piece of the same id from another sender is another message.
        assert_eq!(r.take(SocketAddr::from(([10, 0, 0, 2], 7946)), &pieces[2], now), None);
        assert_eq!(r.take(from, &pieces[2], now).as_deref(), Some(&body[..]));
        // Pieces left too long are dropped.
        let mut r = Reassembly::default();
        let _ = r.take(from, &pieces[0], now);
        let _ = r.take(from, &pieces[1], now + REASSEMBLY_TIMEOUT);
        assert_eq!(r.take(from, &pieces[2], now + REASSEMBLY_TIMEOUT), None);
        assert!(frame(1, &vec![0; PIECE * MAX_PIECES + 1]).is_none());
        assert_eq!(frame(1, b"short").unwrap(), vec![b"\0short".to_vec()]);
    }

    #[test]
    fn a_sealed_datagram_does_not_carry_the_gossip_in_clear() {
        let key = DataKey::from_bytes([1; 32]);
        let mut rng = crate::model::random::os();
        let plain = b"pollster:meraki-org effective_rps 9.5".to_vec();
        let sealed = key.seal_bytes(&mut rng, b"a", &plain);
        assert_eq!(sealed.len(), plain.len() + DATAGRAM_OVERHEAD);
        assert!(!sealed.windows(8).any(|w| w == b"pollster"));
        assert_eq!(key.open_bytes(b"a", &sealed).as_deref(), Some(&plain[..]));
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(key.open_bytes(b"a", &flipped), None);
        assert_eq!(key.open_bytes(b"b", &sealed), None);
    }
}
