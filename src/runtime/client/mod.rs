//! The API client under kube's `Client`: client-go's `rest` package (what a
//! `rest.Config` sets up), as tower layers.
//!
//! - [`rate_limit`]: `rest.Config{QPS, Burst}`, off by default;
//! - [`timeout`]: the deadline every request gets, and the bound on a
//!   response body ([`body`]);
//! - [`connect`]: the HTTP/2 connection and its health check;
//! - [`retry_after`] and [`window`]: what happens when the server answers
//!   429 (wait as told; send fewer at once);
//! - [`fence`]: writes go out only while our leader Lease is fresh;
//! - [`metrics`] and [`span_status`]: each request counted, and the status of
//!   API writes recorded on their trace spans;
//! - [`protobuf`]: Kubernetes' protobuf encoding for built-in kinds, as
//!   client-go's typed clientsets use it;
//! - [`unread`]: creates whose answer is not read back into an object;
//! - [`discovery`]: which versions of an API group serve a resource, asked
//!   at startup (client-go's `discovery`);
//! - [`namespace_gone`]: a write refused because its namespace is being
//!   deleted or is gone, which no retry changes;
//! - [`work_gauge`]: the work clients' requests in flight, which the event
//!   writer lets go first, and their fastest recent round trip
//!   ([`fastest_recent`]), against which the writer tells a queue at the
//!   server.
//!
//! Chapter: `docs/11-client-cache-recorder.md`; protobuf in
//! `docs/01-reflector.md` and `docs/benchmarks.md`.

pub mod body;
pub mod connect;
pub mod discovery;
pub mod fastest_recent;
pub mod fence;
pub mod metrics;
pub mod namespace_gone;
pub mod protobuf;
pub mod rate_limit;
pub mod retry_after;
pub mod span_status;
pub mod timeout;
pub mod unread;
pub mod window;
pub mod work_gauge;
