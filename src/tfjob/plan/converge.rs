//! Children toward the spec: a Pod for every replica that has none (when
//! the gates and integrations allow creates), a Service for every replica,
//! and none past the spec's counts (scaled down).
use crate::tfjob::children::ChildContext;
use crate::tfjob::children::tf_config::replica_name;

use super::integration::Pass;
use super::slots::{Slots, delete_pod, in_spec};
use super::tally::{Tally, terminating};
use super::{Action, Plan, PlanConfig};

pub(super) fn children(
    p: &mut Plan,
    pass: &Pass<'_>,
    cfg: &PlanConfig,
    tally: &Tally,
    children: &Slots<'_>,
    namespace: &str,
    may_create_pods: bool,
) {
    let (name, spec) = (pass.name, pass.spec);
    let domain = cfg.cluster_domain.as_deref();
    let ctx = ChildContext::new(name, namespace, spec, pass.owner, domain);
    for &(rtype, index) in tally.missing_pods.iter().filter(|_| may_create_pods) {
        if ctx.can_build_pod(rtype) {
            let name = replica_name(name, rtype, index);
            p.actions.push(Action::CreatePod { rtype, index, name });
        }
    }
    for (rtype, replica) in &spec.replicas {
        for index in 0..replica.replicas {
            if !children.services.contains_key(&(*rtype, index))
                && let Some(svc) = ctx.service(*rtype, index)
            {
                p.actions.push(Action::CreateService(Box::new(svc)));
            }
        }
    }
    for (&(rtype, index), pods) in &children.pods {
        if !in_spec(spec, rtype, index) {
            for pod in pods.iter().filter(|p| !terminating(p)) {
                p.actions.push(delete_pod(pod));
            }
        }
    }
    for (&(rtype, index), name) in &children.services {
        if !in_spec(spec, rtype, index) {
            p.actions.push(Action::DeleteService { name: name.clone() });
        }
    }
}
