//! The TFJob controller: observe → plan → apply → status.
