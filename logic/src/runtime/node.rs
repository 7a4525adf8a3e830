//! slurmd's pipeline: the node's source and its meter, one sample loop whose every sample
//! goes to the ledger's keeper (attribution, the ledger, the metrics file, the answers to
//! steps' questions), and the doorbell on which steps ask.

mod keeper;
mod sample_loop;

use std::time::Instant;

use super::{Host, Read};
use crate::accounting::{Baseline, EnergyRecord};
use crate::attribution::Site;
use crate::attribution::gres::GresOrder;
use crate::exchange::doorbell::{self, Doorbell};
use crate::meter::Meter;
use crate::metrics::{self, MetricsConfig};
use crate::plugin::Plugin;
use keeper::Keeper;
use sample_loop::SampleLoop;

/// What the node's ledger needs to know from acct_gather.conf.
pub(super) struct LedgerConfig<'a> {
    pub context_id: u16,
    /// Where `EnergyAttribution=shared` splits the node, when it does.
    pub site: Option<&'a Site>,
    /// The static power the ledger splits; `None`: learned.
    pub idle_watts: Option<f64>,
    pub metrics: &'a MetricsConfig,
}

pub(super) struct NodePipeline {
    sampling: SampleLoop,
    /// Where the node's steps ask for their figures; `None` where it could not open (said).
    _doorbell: Option<Doorbell>,
    /// slurmd's own `NODE_ENERGY_UP` (Slurm never asks it there but a tool may): the node's
    /// energy since the meter's first reading.
    baseline: Option<Baseline>,
}

impl NodePipeline {
    /// Opens the node's source, the keeper of its ledger and the doorbell, and starts
    /// sampling. Threads may start here: slurmd loads this configuration after it
    /// daemonizes.
    pub(super) fn open<P: Plugin>(
        host: &dyn Host,
        config: &P::Config,
        ledger: LedgerConfig<'_>,
    ) -> Result<Self, String> {
        let node = host.node_name();
        let mine = P::for_node(config, &node);
        if &mine != config {
            log::info!(
                "%n in acct_gather.conf is this node's name, {node}; %h this host's, {}",
                crate::source::host_name()
            );
        }
        // stacked with a plugin whose meter covers some of its rails, it leaves them out
        let mine = P::stacked(&mine, &host.energy_plugin_types());
        let meter = P::open(&mine).map(Meter::new)?;
        let keeper = keeper::<P>(host, &ledger, &meter);
        let asked = keeper
            .as_ref()
            .map(|k| (k.pace(), k.book(), k.path().to_owned()));
        let mut sampling = SampleLoop::new(meter, keeper);
        // a ring wakes the loop, whose sample the keeper takes as the update asked for
        let doorbell = asked.and_then(|(pace, book, ledger)| {
            let bell = doorbell::doorbell_path(&ledger);
            Doorbell::open(&bell, pace, book, sampling.waker())
                .inspect_err(|e| {
                    log::error!(
                        "{e}; steps' figures are brought forward from the last ledger at \
                         their ends"
                    )
                })
                .ok()
        });
        sampling.ensure_running();
        Ok(Self {
            sampling,
            _doorbell: doorbell,
            baseline: None,
        })
    }

    /// The meter, its sample loop running (started again if it ended).
    fn meter(&mut self) -> &Meter {
        self.sampling.ensure_running();
        self.sampling.meter()
    }

    /// The node's record, from a reading as fresh as `read` asks.
    pub(super) fn node_record(&mut self, read: Read) -> EnergyRecord {
        let meter = self.meter();
        let accounting = match read {
            Read::Now => meter.refresh(),
            Read::Recent => meter.recent(),
            Read::Cached => meter.snapshot(),
        };
        accounting.node_record(Instant::now(), meter.stale_after())
    }

    /// The records of the node's parts. Their number is fixed by the meter's first
    /// reading, taken when it opens, so SENSOR_CNT and the array it sizes agree.
    pub(super) fn part_records(&mut self) -> Vec<(&'static str, EnergyRecord)> {
        let meter = self.meter();
        meter
            .snapshot()
            .part_records(Instant::now(), meter.stale_after())
    }

    /// The node's energy since the meter's first reading, read now.
    pub(super) fn step_record(&mut self) -> EnergyRecord {
        let meter = self.meter();
        let accounting = meter.refresh();
        let (now, stale) = (Instant::now(), meter.stale_after());
        if self.baseline.is_none() {
            self.baseline = Baseline::start(&accounting);
        }
        match &mut self.baseline {
            Some(step) => step.record(&accounting, now, stale),
            None => accounting.node_record(now, stale),
        }
    }
}

/// The keeper of the node's ledger, publishing to the metrics file where one is set; `None`
/// where it cannot open (logged).
fn keeper<P: Plugin>(host: &dyn Host, ledger: &LedgerConfig<'_>, meter: &Meter) -> Option<Keeper> {
    let keeper = match ledger.site {
        _ if P::ALLOCATED_DEVICES => host.spool_dir().and_then(|spool| {
            let order = host.gres_order().unwrap_or_else(|why| {
                log::error!(
                    "{why}; GPUs are matched to Slurm's GRES indexes in the library's order"
                );
                GresOrder::Detected
            });
            let procs = host.proc_root();
            Keeper::devices(&spool, ledger.context_id, order, ledger.idle_watts, &procs)
        }),
        Some(site) => Keeper::shared(site, ledger.context_id, ledger.idle_watts),
        None => host
            .spool_dir()
            .and_then(|spool| Keeper::node(&spool, ledger.context_id)),
    };
    let mut keeper = keeper
        .map(|k| k.writing_off_the_sample())
        .inspect_err(|why| {
            log::error!("no energy ledger: {why}; this node's steps report no energy")
        })
        .ok()?;
    keeper.describe_source(format!("{}: {}", host.plugin_kind(), meter.describe()));
    let stacked = host.energy_plugins() > 1;
    let node = host.node_name();
    let settings = ledger.metrics;
    if let Some(path) = settings.path_for(host.plugin_kind(), stacked, &node) {
        let effect = settings.in_effect(host.private_data());
        let opened = settings
            .access(&effect)
            .and_then(|access| metrics::MetricsFile::open(&path, access));
        match opened {
            Ok(mut file) => {
                log::info!("writing energy metrics to {}", path.display());
                log::info!("{}", effect.describe(&path, settings.group.as_ref()));
                let owners = effect.owners;
                let who = metrics::Identity {
                    node: node.clone(),
                    source: host.plugin_kind().to_string(),
                    attribution: keeper.attribution().to_string(),
                };
                keeper = keeper.publishing(
                    owners,
                    Box::new(move |ledger, owners| {
                        file.write(&metrics::render(ledger, owners, &who));
                    }),
                );
            }
            Err(e) => log::error!("{e}; no metrics file is written"),
        }
    }
    Some(keeper)
}
