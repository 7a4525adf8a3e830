//! `energy_plugin!`: every symbol Slurm's loader looks up, each a thin shim into [`Exported`].
//!
//! [`Exported`]: super::Exported

/// Exports a complete `acct_gather_energy` plugin.
///
/// ```ignore
/// slurm_energy::energy_plugin! {
///     name: "AcctGatherEnergy RAPL plugin (Rust)",
///     plugin: slurm_energy::Rapl,  // its slurm_energy_logic::Plugin, a FamilyMember
/// }
/// ```
///
/// Its `plugin_type` (`acct_gather_energy/rust_rapl`) is the name the family declares for
/// the descriptor (`slurm_energy_logic::FamilyMember::KIND`), written nowhere else.
#[macro_export]
macro_rules! energy_plugin {
    (name: $name:literal, plugin: $plugin:ty $(,)?) => {
        const KIND: $crate::ffi::PluginKind = <$plugin as $crate::ffi::FamilyMember>::KIND;
        const PLUGIN_TYPE: [u8; $crate::ffi::plugin_type_len(KIND)] =
            $crate::ffi::plugin_type(KIND);

        static PLUGIN: $crate::ffi::Exported<$plugin> =
            $crate::ffi::Exported::new($crate::ffi::type_text(&PLUGIN_TYPE));

        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::ffi::nul_joined(&[$name]);

        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static plugin_type: [u8; $crate::ffi::plugin_type_len(KIND)] = PLUGIN_TYPE;

        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static plugin_version: u32 = $crate::ffi::SLURM_VERSION_NUMBER;

        #[unsafe(no_mangle)]
        pub extern "C" fn init() -> ::core::ffi::c_int {
            PLUGIN.init()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn fini() -> ::core::ffi::c_int {
            PLUGIN.fini()
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn acct_gather_energy_p_update_node_energy() -> ::core::ffi::c_int {
            PLUGIN.update_node_energy()
        }

        /// # Safety
        /// Called by Slurm with the `data` its `data_type` defines.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn acct_gather_energy_p_get_data(
            data_type: u32,
            data: *mut ::core::ffi::c_void,
        ) -> ::core::ffi::c_int {
            // SAFETY: forwarded from Slurm.
            unsafe { PLUGIN.get_data(data_type, data) }
        }

        /// # Safety
        /// Called by Slurm with the `data` its `data_type` defines.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn acct_gather_energy_p_set_data(
            data_type: u32,
            data: *mut ::core::ffi::c_void,
        ) -> ::core::ffi::c_int {
            // SAFETY: forwarded from Slurm.
            unsafe { PLUGIN.set_data(data_type, data) }
        }

        /// # Safety
        /// Called by Slurm with its option table.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn acct_gather_energy_p_conf_options(
            full_options: *mut *mut $crate::ffi::sys::s_p_options_t,
            full_options_cnt: *mut ::core::ffi::c_int,
        ) {
            // SAFETY: forwarded from Slurm.
            unsafe { PLUGIN.conf_options(full_options, full_options_cnt) }
        }

        /// # Safety
        /// Called by Slurm with the parsed acct_gather.conf, or NULL.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn acct_gather_energy_p_conf_set(
            context_id: ::core::ffi::c_int,
            tbl: *mut $crate::ffi::sys::s_p_hashtbl_t,
        ) {
            // SAFETY: forwarded from Slurm.
            unsafe { PLUGIN.conf_set(context_id, tbl) }
        }

        /// # Safety
        /// Called by Slurm with the list `scontrol show config` prints.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn acct_gather_energy_p_conf_values(
            data: *mut *mut $crate::ffi::sys::xlist,
        ) {
            // SAFETY: forwarded from Slurm.
            unsafe { PLUGIN.conf_values(data) }
        }
    };
}
