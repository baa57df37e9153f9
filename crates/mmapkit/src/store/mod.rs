//! Array files: the `.npy` format ([`npy`]) and, built on it, growable
//! array stores whose first axis grows in place.
pub mod npy;
