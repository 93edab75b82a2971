//! Dataset generators and converters.
