//! A key whose default depends on `algorithm` (`update.eps_high`, `score.advantage`, ...):
//! its raw value can only be read by resolving it against that default, which
//! `Resolved::new` does once, so no stage can read an unset key as "off".

use serde::{Deserialize, Serialize};

/// The value a configuration gave a key whose default depends on `algorithm`, if any.
/// Serialised exactly as the `Option` it wraps (so configuration hashes are unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ByAlgorithm<T>(Option<T>);

/// Unset: the algorithm decides.
impl<T> Default for ByAlgorithm<T> {
    fn default() -> Self {
        ByAlgorithm(None)
    }
}

impl<T: Copy> ByAlgorithm<T> {
    /// The key set to `value`.
    pub fn set(value: T) -> Self {
        ByAlgorithm(Some(value))
    }

    /// The value given, else `default` (the algorithm's).
    /// The value set in the configuration, if any.
    pub fn value(self) -> Option<T> {
        self.0
    }

    pub fn resolve(self, default: T) -> T {
        self.0.unwrap_or(default)
    }
}

#[cfg(test)]
mod tests {
    use super::ByAlgorithm;

    #[test]
    fn serialised_as_the_option_it_wraps() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct T {
            #[serde(default)]
            a: ByAlgorithm<f64>,
        }
        let unset: T = toml::from_str("").unwrap_or(T {
            a: ByAlgorithm::set(9.0),
        });
        assert_eq!(unset.a, ByAlgorithm::default());
        assert_eq!(
            serde_json::to_string(&unset).ok().as_deref(),
            Some(r#"{"a":null}"#)
        );
        assert_eq!(toml::to_string(&unset).ok().as_deref(), Some(""));
        let set: T = toml::from_str("a = 0.5").unwrap_or(T {
            a: ByAlgorithm::default(),
        });
        assert_eq!(set.a.resolve(1.0), 0.5);
        assert_eq!(unset.a.resolve(1.0), 1.0);
        assert_eq!(
            serde_json::to_string(&set).ok().as_deref(),
            Some(r#"{"a":0.5}"#)
        );
    }
}
