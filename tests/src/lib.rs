//! End-to-end tests live in `tests/tests/`; they drive the built `deltarl` binary.
