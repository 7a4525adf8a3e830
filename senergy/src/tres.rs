//! Slurm's TRES strings as slurmdbd returns them (`"1=4,2=1024,3=9712"`: TRES id `=`
//! count), and the sentinels Slurm writes where it knows no figure.

/// The energy TRES (`TRES_ENERGY` in Slurm's `src/common/slurmdb_defs.h`: cpu 1, mem 2,
/// energy 3, node 4, billing 5, fixed ids in every release).
pub const ENERGY: u32 = 3;

/// `NO_VAL` as a 32-bit field: unknown `current_watts` and friends.
const NO_VAL: u64 = 0xffff_fffe;

/// The count of TRES `id` in `tres`, if listed.
pub fn count(tres: &str, id: u32) -> Option<u64> {
    tres.split(',').find_map(|item| {
        let (key, value) = item.split_once('=')?;
        (key.trim().parse::<u32>().ok()? == id)
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// An energy in joules, unless it is a sentinel. `NO_VAL64` and `INFINITE64` mean "no
/// figure", and a sum that included one of them wrapped into the upper half of u64: no
/// real figure comes near 2^63 J.
pub fn joules(value: u64) -> Option<u64> {
    (value < 1 << 63).then_some(value)
}

/// A power in watts from a 32-bit field (Slurm's `current_watts`, copied into the step's
/// TRESUsageOutMax): `NO_VAL` and above are sentinels, and 0 is what Slurm's energy
/// plugins (and ours since the `NO_VAL` fix) report before they know a rate.
pub fn watts(value: u64) -> Option<u64> {
    (value != 0 && value < NO_VAL).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_energy_entry() {
        assert_eq!(count("1=4,2=1024,3=9712,4=3", ENERGY), Some(9712));
        assert_eq!(count("1=4,2=1024,4=3", ENERGY), None);
        assert_eq!(count("", ENERGY), None);
        assert_eq!(count("3=x", ENERGY), None);
        // 30 is not 3
        assert_eq!(count("30=5,3=7", ENERGY), Some(7));
    }

    #[test]
    fn sentinels_are_no_figure() {
        assert_eq!(joules(0xffff_ffff_ffff_fffe), None);
        assert_eq!(joules(u64::MAX), None);
        assert_eq!(joules(0xffff_ffff_ffff_fffe_u64.wrapping_add(0)), None);
        assert_eq!(joules(4_294_967_294), Some(4_294_967_294));
        assert_eq!(joules(0), Some(0));
        assert_eq!(watts(4_294_967_294), None);
        assert_eq!(watts(0), None);
        assert_eq!(watts(517), Some(517));
    }
}
