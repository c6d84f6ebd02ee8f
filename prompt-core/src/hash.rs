//! Content-derived identities: node ids and prefix fingerprints.

use std::fmt;

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// 128 bits of SHA-256, shown as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest128([u8; 16]);

impl Digest128 {
    /// Hashes the concatenation of `parts`.
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        let full = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        Self(out)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// A digest from its raw bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for Digest128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Digest128 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Identity of a history node: the hash of its parent's id and its own serialized bytes.
///
/// Chaining in the parent makes two identical messages at different positions distinct
/// (a user who types "yes" twice), and makes a node id name exactly the cache prefix that
/// ends at that node, as block hashes do in vLLM's prefix cache. The id is assigned once at
/// append and never recomputed.
pub type NodeId = Digest128;

/// Hash of a request's frozen prefix bytes; stable across processes, usable as an OpenAI
/// `prompt_cache_key` or a cache-aware router key.
pub type Fingerprint = Digest128;
