//! A response's key for messages (a module of its own: the tables name it, and the
//! joins over the tables re-export it).

/// A response's key, shown the way every message names a response:
/// `prompt_id "p3", sample_idx 2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResponseKey<'a> {
    pub prompt_id: &'a str,
    pub sample_idx: u32,
}

impl std::fmt::Display for ResponseKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "prompt_id {:?}, sample_idx {}",
            self.prompt_id, self.sample_idx
        )
    }
}
