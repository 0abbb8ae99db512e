//! The membership layer's coordinated-shutdown tasks (Akka's `ClusterCoordinatedShutdown`
//! tasks):
//!
//! - `cluster-leave` / "leave": a member that is not leaving yet leaves; the task ends when
//!   this node is Leaving, Exiting or Down, or no longer a member.
//! - `cluster-exiting` / "wait-exiting": ends when this node is Exiting (or Down, or no
//!   longer a member). Layers add their hand-over tasks to the same phase.
//! - `cluster-exiting-done` / "exiting-completed": tells the membership machine the exiting
//!   tasks are done — from then on the leader may remove this node — and waits for the
//!   removal (bounded by the phase timeout).
//! - `cluster-shutdown` / "membership-daemon": the membership host sends what is queued and
//!   stops; then the daemon drains and closes remoting and answers.

use concord_core::{MemberStatus, MembershipView};
use tracing::warn;

use super::handle::Cluster;
use crate::coordinated_shutdown::{CoordinatedShutdown, Phase};

pub(super) fn register(cluster: &Cluster, cs: &CoordinatedShutdown) {
    let c = cluster.clone();
    add(cs, Phase::ClusterLeave, "leave", move || leave(c));
    let c = cluster.clone();
    add(cs, Phase::ClusterExiting, "wait-exiting", move || {
        wait_exiting(c)
    });
    let c = cluster.clone();
    add(
        cs,
        Phase::ClusterExitingDone,
        "exiting-completed",
        move || exiting_completed(c),
    );
    let c = cluster.clone();
    add(cs, Phase::ClusterShutdown, "membership-daemon", move || {
        stop_daemon(c)
    });
}

fn add<F, Fut>(cs: &CoordinatedShutdown, phase: Phase, name: &str, task: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if let Err(e) = cs.add_task(phase, name, task) {
        warn!(error = %e, "cannot add the membership shutdown task");
    }
}

fn self_status(view: &MembershipView) -> Option<MemberStatus> {
    view.self_member().map(|m| m.status)
}

/// Waits until `done` holds for the view, or the membership protocol has ended.
async fn wait_view(cluster: &Cluster, done: impl Fn(&MembershipView) -> bool) {
    let mut views = cluster.membership();
    loop {
        if cluster.membership_ended().is_some() || done(&views.borrow_and_update()) {
            return;
        }
        tokio::select! {
            r = views.changed() => if r.is_err() { return },
            _ = cluster.wait_membership_ended() => return,
        }
    }
}

/// Statuses of a member that has not started to leave (`leave` moves it to Leaving).
const NOT_LEAVING: [MemberStatus; 5] = [
    MemberStatus::Joining,
    MemberStatus::WeaklyUp,
    MemberStatus::Up,
    MemberStatus::PreparingForShutdown,
    MemberStatus::ReadyForShutdown,
];

/// True once this node is Leaving, Exiting or Down, or no longer (or not yet) a member.
fn leaving_or_gone(v: &MembershipView) -> bool {
    !self_status(v).is_some_and(|s| NOT_LEAVING.contains(&s))
}

/// True once this node is Exiting or Down, or no longer (or not yet) a member.
fn exiting_or_gone(v: &MembershipView) -> bool {
    leaving_or_gone(v) && self_status(v) != Some(MemberStatus::Leaving)
}

async fn leave(cluster: Cluster) {
    if leaving_or_gone(&cluster.view()) || cluster.membership_ended().is_some() {
        return;
    }
    if let Err(e) = cluster.leave(cluster.self_address().clone()).await {
        warn!(error = %e, "coordinated shutdown: leave failed");
        return;
    }
    wait_view(&cluster, leaving_or_gone).await;
}

async fn wait_exiting(cluster: Cluster) {
    wait_view(&cluster, exiting_or_gone).await;
}

async fn exiting_completed(cluster: Cluster) {
    if cluster.exiting_completed().await.is_err() {
        return;
    }
    // A member waits for its removal (a Down member for the end of its membership).
    if self_status(&cluster.view()).is_some() {
        cluster.wait_membership_ended().await;
    }
}

async fn stop_daemon(cluster: Cluster) {
    let _ = cluster.shutdown_daemon().await;
}
