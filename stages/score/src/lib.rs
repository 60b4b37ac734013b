//! The score stage: verification, rewards, group advantages (no libtorch).
