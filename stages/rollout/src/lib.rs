//! The rollout stage: sample G responses per prompt.
