//! The informer cache: client-go's `tools/cache`.
//!
//! An object's way in, in order: the [`reflector`] lists and watches the API
//! server and turns what it sees into deltas; the [`delta_fifo`] queues them
//! per key; the [`informer`] pops them, writes the [`store`] (the Indexer)
//! first, then tells its handlers. The [`factory`] hands out one shared
//! informer per kind. [`key`] is the `namespace/name` everything is keyed by;
//! [`object`] is what a cached kind must be.
//!
//! Chapters: `docs/01-reflector.md`, `docs/02-delta-fifo.md`,
//! `docs/03-informer.md`, `docs/04-indexer.md`; the factory as the
//! controller's cache in `docs/11-client-cache-recorder.md`.

pub mod delta_fifo;
pub mod factory;
pub mod informer;
pub mod key;
pub mod object;
pub mod reflector;
pub mod store;
