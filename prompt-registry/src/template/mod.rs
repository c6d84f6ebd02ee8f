//! Chat-template probe (to be written).
