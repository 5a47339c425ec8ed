//! The `kubeflow.org/v1` TFJob API: types, defaults and constants. No I/O.
