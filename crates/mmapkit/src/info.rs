//! File information (stub, being written).
