//! What can go wrong in leader election: a config client-go would refuse,
//! or a read or write of the lock that failed. client-go's
//! `tools/leaderelection` returns these as wrapped `error`s; here they are
//! one enum with a stable `category()`.
/// Errors from leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("failed to validate leader election config: {0}")]
    InvalidConfig(String),
    #[error("failed to read lease {name}")]
    Get {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to create lease {name}")]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to update lease {name}")]
    Update {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl LeaderElectionError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "invalid_config",
            Self::Get { .. } => "get",
            Self::Create { .. } => "create",
            Self::Update { .. } => "update",
        }
    }
}
