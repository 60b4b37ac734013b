//! deltarl pipeline
