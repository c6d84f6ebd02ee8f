//! Measuring the cache the way providers bill it (to be written).
