//! The ledger file's numbers as they are read: each finite and not negative, or the file
//! is refused (a corrupt file must never put garbage in accounting). Apart from the file's
//! types so that every type the file holds ([`super::Account`], [`super::parts`]'s) can
//! check its own numbers without the file's module and those types using each other.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// A number of the file, refused when it is not finite or negative.
pub(super) fn finite<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(serde::de::Error::custom(
            "a number that is not finite or is negative",
        ))
    }
}

/// [`finite`], or `null`.
pub(super) fn optional_finite<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(d)? {
        Some(x) if !(x.is_finite() && x >= 0.0) => Err(serde::de::Error::custom(
            "a number that is not finite or is negative",
        )),
        x => Ok(x),
    }
}

/// Values of a map each [`finite`].
pub(super) fn finite_values<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let map = BTreeMap::<String, f64>::deserialize(d)?;
    match map.values().all(|x| x.is_finite() && *x >= 0.0) {
        true => Ok(map),
        false => Err(serde::de::Error::custom(
            "a number that is not finite or is negative",
        )),
    }
}
