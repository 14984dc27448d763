//! blox-goodput's integration tests, one binary (it builds and links once):
//! the model against the Pollux artifact's outputs (`artifact_vectors`),
//! derived applications (`derived`) and per-GPU-type profiles (`typed`).

mod artifact_vectors;
mod derived;
mod typed;
