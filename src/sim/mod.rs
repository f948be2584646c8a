//! The deterministic simulator (test builds only).
