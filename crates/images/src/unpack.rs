//! Unpacking one layer tar into its own directory.
