//! Owner names as a hold stores them.

use std::borrow::Borrow;
use std::ops::Deref;

/// Owner names up to this many bytes are stored inline (a hyphenated UUID
/// is 36): a lock with one such holder is a single allocation.
const INLINE_LEN: usize = 38;

/// An owner name: inline when short, on the heap otherwise.
#[derive(Clone)]
pub enum OwnerName {
    Inline { len: u8, bytes: [u8; INLINE_LEN] },
    Heap(Box<[u8]>),
}

impl OwnerName {
    pub fn new(name: &[u8]) -> Self {
        if name.len() <= INLINE_LEN {
            let mut bytes = [0u8; INLINE_LEN];
            bytes[..name.len()].copy_from_slice(name);
            OwnerName::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            OwnerName::Heap(name.into())
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            OwnerName::Inline { len, bytes } => &bytes[..usize::from(*len)],
            OwnerName::Heap(bytes) => bytes,
        }
    }

    /// Heap bytes used beside the hold (for MEMORY USAGE).
    pub fn heap_len(&self) -> usize {
        match self {
            OwnerName::Inline { .. } => 0,
            OwnerName::Heap(bytes) => bytes.len(),
        }
    }
}

impl Deref for OwnerName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for OwnerName {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for OwnerName {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&[u8]> for OwnerName {
    fn from(name: &[u8]) -> Self {
        OwnerName::new(name)
    }
}

impl<const N: usize> From<&[u8; N]> for OwnerName {
    fn from(name: &[u8; N]) -> Self {
        OwnerName::new(name)
    }
}

impl<const N: usize> From<[u8; N]> for OwnerName {
    fn from(name: [u8; N]) -> Self {
        OwnerName::new(&name)
    }
}

impl From<Box<[u8]>> for OwnerName {
    fn from(name: Box<[u8]>) -> Self {
        if name.len() <= INLINE_LEN {
            OwnerName::new(&name)
        } else {
            OwnerName::Heap(name)
        }
    }
}

impl From<Vec<u8>> for OwnerName {
    fn from(name: Vec<u8>) -> Self {
        OwnerName::from(name.into_boxed_slice())
    }
}

impl From<OwnerName> for Box<[u8]> {
    fn from(name: OwnerName) -> Self {
        match name {
            OwnerName::Heap(bytes) => bytes,
            inline => inline.as_bytes().into(),
        }
    }
}

impl PartialEq for OwnerName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for OwnerName {}

impl PartialOrd for OwnerName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OwnerName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::hash::Hash for OwnerName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for OwnerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_bytes().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_inline_and_long_ones_on_the_heap() {
        let uuid = b"0f8fad5b-d9cb-469f-a165-70867728950e";
        let short = OwnerName::new(uuid);
        assert!(matches!(short, OwnerName::Inline { .. }));
        assert_eq!(&*short, uuid);
        assert_eq!(short.heap_len(), 0);
        let long = OwnerName::new(&[b'x'; 39]);
        assert!(matches!(long, OwnerName::Heap(_)));
        assert_eq!(long.len(), 39);
        assert_eq!(OwnerName::new(b""), OwnerName::from(Vec::new()));
        let boxed: Box<[u8]> = short.clone().into();
        assert_eq!(OwnerName::from(boxed), short);
    }
}
