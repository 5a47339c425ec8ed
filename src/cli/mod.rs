//! The binary's side: command-line parsing for `main`. Nothing in the
//! library imports it.
//!
//! [`args`] is the command line itself (clap); [`flags`] the flag values
//! spelled as controller-runtime operators spell them (bind addresses, Go
//! durations) and where the leader-election namespace comes from. The flags
//! are described for operators in `docs/operating.md` ("Flags").

pub mod args;
pub mod flags;
