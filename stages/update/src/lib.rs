//! The update stage: the clipped policy-gradient loss family and AdamW.
