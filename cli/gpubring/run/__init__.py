"""The ansible-runner wrapper: one run of a playbook (or of the phases asked for) on an inventory.

    steps        the executor: every verb that runs playbooks, through run_steps (view, summary, --json)
    settings     RunSettings (what to run, where, with the operator's RunOptions) and RunResult
    process      run(): ansible-runner started on the run folder, the signals that cancel it, the report
    session      the callbacks ansible-runner calls (events, status, cancel) and the RunState they fold
    folder       the run folder: generated playbook, env/settings, -e files, environment, scrubbing
    accelerate   Mitogen when it fits this ansible-core, the linear strategy otherwise
    cancel       CancelFlag (signals, a caller) and the Reaper of what a cancel leaves running
    cancelwait   the wait for the hosts' package work after a cancel
    leftovers    what killed runs leave: -e files (clear_leftovers) and orphans (find/kill_orphans)
    proctable    what /proc says about processes

`process.run()` gives each run its own absolute private_data_dir under
<inventory root>/.gpubring/runs/<UTC timestamp>-<command>/ (mode 0700; see gpubring.runstore):

    owner.json                       the gpubring process of the run (pid and start time): a later
                                     start tells a run that is over from one still going
    vars/gpubring.json               the rolling batch size gpubring_serial (Ansible templates play
                                     keywords such as `serial` before any host's variables exist),
                                     passed with `-e @`
    vars/extra-vars-N.json           the operator's -e mappings (0600), only while the run (or the
                                     wait after its cancel) goes
    tmp/                             ansible's local temporary files (ANSIBLE_LOCAL_TEMP), only while
                                     the run (or the wait after its cancel) goes
    project/run.yml                  imports the phase playbooks asked for, in order (up)
    env/settings                     ansible-runner settings (how often the cancel flag is read)
    artifacts/<run>/                 ansible-runner's artifacts: command (environment scrubbed),
                                     stdout, job_events/, rc, status
    artifacts/<run>-wait/            the same of the wait after a cancel (below), when there was one
    report.json                      the run report (gpubring.report)

The inventory goes to ansible-runner as its absolute path, never as a dict (GPU_NOTES 15). The
settings.yml defaults and the version matrix are not passed at all: the collection's vars plugin
(plugins/vars/defaults.py) gives them to every play, as it does to a plain ansible-playbook run.
The operator's extra vars may hold secrets: they never go through ansible-runner's env/extravars
or the command line; they are written to 0600 files under the run folder (0700), passed with
`-e @file`, and removed when the run ends (success, failure or cancel). Nothing goes to the system's
temporary folder. A gpubring that is killed (SIGKILL) cannot remove them: the next run on the same
inventory removes what runs that are over left (`leftovers.clear_leftovers`), and reports the
ansible-playbook processes such a run left running (`leftovers.find_orphans`, `kill_orphans`).

A cancel (Ctrl-C, SIGTERM, SIGHUP, or a caller's CancelFlag) stops ansible-playbook and every process
it started here (`cancel.Reaper`), but not what its tasks started on the hosts: an apt install or a `dkms
build` goes on there, and a re-run would meet a busy dpkg. So, once the local processes are stopped,
the run names the hosts that still had a task in flight (`RunState.in_flight`) and waits, up to
gpubring_cancel_wait_timeout seconds (settings.yml; 0 does not wait), for their package work to end:
a second, short ansible-runner run of playbooks/wait_idle.yml (preflight's package_wait.yml) limited to
those hosts, with the same inventory, -e and connection settings, the linear strategy (no Mitogen
socket), its -e files and local temporary files removed as the first run's are. A second signal
stops that wait at once (the hosts that may still be busy are named); the exit code stays 3 and
report.json's `cancel_wait` says what the wait found.

Nothing in this package imports ansible or ansible_runner at module level.
"""
