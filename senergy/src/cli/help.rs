//! What `--help` says beyond the options: where the manual is, what the figures mean, and
//! examples. `-h` shows each subcommand's examples only; `--help` its notes too. Every
//! pointer to a schema names docs/senergy.md, where the schemas are.

/// `senergy --help`, below the list of subcommands.
pub const TOP: &str = "\
With no command: your jobs since midnight, a line each, as sacct lists them (the options
above: `senergy -S now-7days -o id,name,energy_j,cost`).
Each command's options and examples: senergy COMMAND --help.
The manual, with the JSON schemas: docs/senergy.md (installed with the packages as
/usr/share/doc/slurm-energy-rust/docs/senergy.md).

EXIT STATUS
    0  success; record: always (an Epilog that fails drains its node: what it could not
       keep is one line on stderr)
    2  bad command line
    3  job: a job you named is unknown or not visible to you (the others are reported)
    4  bad site file, intensity series or figure
    5  Slurm's configuration cannot be loaded, slurmdbd is unreachable, or the query failed
       (for MailProg's summary also: all its slots held, mail_summaries)
    6  check: something on the node keeps its energy from being accounted (a FAIL line)
";

pub const JOB_EXAMPLES: &str = "\
EXAMPLES
    senergy job 1234
        Job 1234's energy, power and nodes, step by step. An array job's id gives all its
        elements; 1234_7 gives one element, 1234.0 only its step 0.
    senergy job 1234 1240 --json
        Both jobs as JSON, for a script (its fields: docs/senergy.md, \"JSON schema\").
    senergy job 1234 --carbon-intensity 350 --price 0.25 --currency EUR
        Also its emissions at 350 gCO2e per kWh and its cost at 0.25 EUR per kWh.
    senergy job 1234 --carbon-intensity 250 --market-intensity 0 --pue 1.1
        Its emissions by scope: Scope 2 location-based at 250 and market-based at 0
        gCO2e/kWh, both on the facility's energy (1.1 times the IT energy).
    senergy job 1234 --plot job.svg
        Draws its power over time on each node into job.svg (from Prometheus; without it,
        its steps' and nodes' energy as bars).
";

pub const USAGE_EXAMPLES: &str = "\
EXAMPLES
    senergy usage
        The energy of the jobs that ended in the last 30 days, per account and user (the
        ones slurmdbd lets you see).
    senergy usage --start 2026-11-01 --end 2026-12-01 --accounts physics,chem
        November 2026, for the accounts physics and chem only.
    senergy usage --start 2026-11-01 --price 0.25 --currency EUR --csv > usage.csv
        Since November 1st with its cost, as CSV for a spreadsheet.
";

pub const CHECK_EXAMPLES: &str = "\
EXAMPLES
    sudo senergy check
        Checks this node's energy plugin, one line per check; exits 6 if something keeps
        the node's energy from being accounted.
    sudo senergy check --compare 60
        Also measures the node for 60 seconds with another reader of the same hardware
        and says whether slurmd's figure agrees with it.
    sudo senergy check --json
        The same checks as JSON, for monitoring (its fields: docs/senergy.md,
        \"senergy check\").
";

const ENERGY: &str = "\
ENERGY
    Figures come from Slurm's accounting (slurmdbd), as the calling user: slurmdbd's
    PrivateData decides which jobs you see. A job's energy is what sacct shows as its
    ConsumedEnergy. A value Slurm marks as unknown is never shown as a number. Data:
      complete  every step and node reported energy
      partial   some did not (or the job is still running): the figure is a lower bound
      missing   no energy recorded (no energy plugin, or every reading unavailable)
";

const EMISSIONS_AND_COST: &str = "\
EMISSIONS AND COST
    emissions = kWh x carbon intensity (gCO2e/kWh); cost = kWh x price per kWh. The flags
    override the site file (--config, else $SENERGY_CONF, else /etc/slurm/senergy.conf),
    which is TOML:
        carbon_intensity = 350                       # gCO2e/kWh
        carbon_intensity_csv = \"/etc/slurm/grid.csv\" # a series, as --carbon-csv
        price_per_kwh = 0.25
        currency = \"EUR\"
        prometheus_url = \"http://prometheus:9090\"   # as --prometheus (job only)
        version = \"2026-11\"                         # stamped in every report
        market_intensity = 0                         # as --market-intensity
        pue = 1.1                                    # as --pue (pue_csv: a series)
        [[node_class]]                               # Scope 3, embodied
        name = \"standard\"
        nodes = \"n[0001-5860]\"                     # or features = [\"a100\"]
        embodied_kgco2e = 1249.1
        lifetime_years = 6
        utilisation = 1.0
    A series (--carbon-csv) is a CSV of time,g_co2e_per_kwh (unix seconds or RFC 3339) at
    any interval, or an Electricity Maps or RTE eCO2mix export as downloaded; a time it
    does not cover takes the static intensity. With a series, each piece of a job's energy
    takes the intensity of its time: from Prometheus's samples of the job's energy (job
    --prometheus), else from its steps, else spread evenly over its run (the report says
    which). By scope: Scope 2 location-based (--carbon-intensity) and market-based
    (--market-intensity, --market-csv), on the facility's energy (IT x --pue, --pue-csv);
    Scope 3 embodied per node-hour: embodied / (lifetime hours x utilisation) of each
    node's class. Every report ends with the factors it used and where they came from.
    docs/senergy.md, \"Emissions and cost\", has the details.
";

/// `senergy job --help`, below its options.
pub fn job_long() -> String {
    [
    ENERGY,
    "    Per step, the nodes that used the most and the least (for 3 nodes or fewer, every\n",
    "    node).\n\n",
    EMISSIONS_AND_COST,
    "\nPLOTS\n",
    "    --plot FILE.svg (or .png): with Prometheus, the job's power over time on each node,\n",
    "    its steps shaded and named; without, its steps' and nodes' energy as bars. PNG needs\n",
    "    a TrueType font (fonts-dejavu-core, or SENERGY_FONT=path.ttf).\n\n",
    JOB_EXAMPLES,
    ]
    .concat()
}

/// `senergy usage --help`, below its options.
pub fn usage_long() -> String {
    [
        ENERGY,
        "    Each job counts, in full, in the period in which it ended.\n\n",
        EMISSIONS_AND_COST,
        "\n",
        USAGE_EXAMPLES,
    ]
    .concat()
}

/// `senergy check --help`, below its options.
pub fn check_long() -> String {
    [
        "CHECKS\n",
        "    Run on a compute node as root (slurmd's energy ledger is root's). It says whether\n",
        "    the node's energy plugin works: the plugin AcctGatherEnergyType names and the Slurm\n",
        "    release its file was built for (against slurmd's), whether slurmd runs for the\n",
        "    node, what the plugin reads, how fresh its last reading is (slurmd takes one every\n",
        "    second: older than 10 s is stale), the node's watts, Slurm's job cgroups where\n",
        "    EnergyAttribution=shared, and the plugin's errors in slurmd's log since slurmd\n",
        "    started. Each line is ok, warn or FAIL; any FAIL exits 6. docs/senergy.md,\n",
        "    \"senergy check\", has what each check reads.\n\n",
        CHECK_EXAMPLES,
    ]
    .concat()
}
