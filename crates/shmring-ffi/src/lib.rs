//! C ABI for shmring (see `include/shmring.h`).
