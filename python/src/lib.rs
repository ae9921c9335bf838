//! Python bindings for shmring (built with maturin).
