//! `data.source`, read once: a built-in dataset's name, or a file of prompts.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::task::{Builtin, Task};

/// Where the training prompts come from. It is written as one string (a configuration's
/// `data.source`, a stage's settings): a built-in dataset's name, else a file's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A built-in dataset ([`Builtin::sources`]).
    Builtin(Builtin),
    /// A JSONL or Parquet file of prompts.
    File(PathBuf),
}

impl Source {
    /// The source a `data.source` string names.
    pub fn parse(text: &str) -> Source {
        match Builtin::from_source(text) {
            Some(b) => Source::Builtin(b),
            None => Source::File(PathBuf::from(text)),
        }
    }

    /// The built-in dataset, when it is one.
    pub fn builtin(&self) -> Option<Builtin> {
        match self {
            Source::Builtin(b) => Some(*b),
            Source::File(_) => None,
        }
    }

    /// The tiny model's task, when the source is one.
    pub fn task(&self) -> Option<Task> {
        self.builtin().and_then(Builtin::tiny)
    }

    /// The prompt file, when the source is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Source::Builtin(_) => None,
            Source::File(p) => Some(p),
        }
    }
}

/// The string it was read from.
impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin(b) => f.write_str(b.source()),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Source::Builtin(b) => s.serialize_str(b.source()),
            // A path read from a string is valid UTF-8; one that is not has no string form.
            Source::File(p) => match p.to_str() {
                Some(text) => s.serialize_str(text),
                None => Err(serde::ser::Error::custom(format!(
                    "data.source {} is not valid UTF-8",
                    p.display()
                ))),
            },
        }
    }
}

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|text| Source::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_source_is_read_once_and_written_back_as_it_was_read() {
        for text in [
            "tiny-arith",
            "tiny-code",
            "word-problems",
            "data/prompts.jsonl",
        ] {
            let s = Source::parse(text);
            assert_eq!(s.to_string(), text);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<Source>(&json).unwrap(), s);
        }
        assert_eq!(
            Source::parse("tiny-steps").task(),
            Some(Task::Steps),
            "a tiny task"
        );
        assert_eq!(Source::parse("word-problems").task(), None);
        assert_eq!(
            Source::parse("word-problems").builtin(),
            Some(Builtin::Words)
        );
        // Anything else is a file, even one named like a task with a path before it.
        let f = Source::parse("./tiny-arith");
        assert_eq!(f.file(), Some(Path::new("./tiny-arith")));
        assert_eq!(f.builtin(), None);
    }
}
