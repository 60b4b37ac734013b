//! The features stage: per-token gradient proxies.
