//! API Priority and Fairness: the cap some runs put on the peer's user, and
//! the identity that lets it apply.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::PEER_USER;
use crate::cluster::{is_conflict, is_not_found, wait_until};
use crate::peers::{APF_GROUP, APF_LEVEL};
use crate::settings::Settings;

/// Installs the APF cap for the peer's user (see [`APF_LEVEL`]) and waits
/// until the API server's flow-control configuration has it.
pub(crate) async fn install_apf_cap(admin: &Client, queue_length: u32) -> anyhow::Result<()> {
    let levels: Api<PriorityLevelConfiguration> = Api::all(admin.clone());
    let schemas: Api<FlowSchema> = Api::all(admin.clone());
    remove_apf_cap(admin).await?;
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": APF_LEVEL},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {
                "queues": 1, "handSize": 1, "queueLengthLimit": queue_length
            }}
        }}
    }))?;
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": APF_LEVEL},
        "spec": {
            "priorityLevelConfiguration": {"name": APF_LEVEL},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": PEER_USER}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
            }]
        }
    }))?;
    levels.create(&PostParams::default(), &level).await?;
    schemas.create(&PostParams::default(), &schema).await?;
    // The API server's config controller marks the FlowSchema's condition
    // once it has digested it.
    wait_until(
        "the APF FlowSchema to be in use",
        Duration::from_secs(30),
        || {
            let schemas = schemas.clone();
            async move {
                let fs = schemas.get(APF_LEVEL).await?;
                Ok(fs.status.and_then(|s| s.conditions).is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_.as_deref() == Some("Dangling")
                            && c.status.as_deref() == Some("False")
                    })
                }))
            }
        },
    )
    .await
}

/// A kubeconfig for user `bench-peer` in group [`APF_GROUP`] (not
/// `system:masters`, so APF applies), signed by the cluster's CA, with
/// cluster-admin through a ClusterRoleBinding.
pub(crate) async fn apf_identity(s: &Settings, admin: &Client) -> anyhow::Result<PathBuf> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let pki = s.cluster_dir.join("pki");
    let dir = pki.join("bench-apf");
    std::fs::create_dir_all(&dir)?;
    let (key, csr, crt, ext) = (
        dir.join("peer.key"),
        dir.join("peer.csr"),
        dir.join("peer.crt"),
        dir.join("peer.ext"),
    );
    // An X.509 v3 certificate (an extension file): rustls refuses v1.
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )?;
    let subject = format!("/O={APF_GROUP}/CN={PEER_USER}");
    for args in [
        vec![
            "genrsa".into(),
            "-out".into(),
            key.display().to_string(),
            "2048".into(),
        ],
        vec![
            "req".into(),
            "-new".into(),
            "-key".into(),
            key.display().to_string(),
            "-subj".into(),
            subject,
            "-out".into(),
            csr.display().to_string(),
        ],
        vec![
            "x509".into(),
            "-req".into(),
            "-in".into(),
            csr.display().to_string(),
            "-CA".into(),
            pki.join("ca.crt").display().to_string(),
            "-CAkey".into(),
            pki.join("ca.key").display().to_string(),
            "-CAcreateserial".into(),
            "-days".into(),
            "2".into(),
            "-sha256".into(),
            "-extfile".into(),
            ext.display().to_string(),
            "-out".into(),
            crt.display().to_string(),
        ],
    ] {
        let out = Command::new("openssl").args(&args).output()?;
        if !out.status.success() {
            bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let peer_config = std::fs::read_to_string(s.cluster_dir.join("kubeconfigs").join(PEER_USER))?;
    let server = peer_config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("no server in the bench-peer kubeconfig")?;
    let kubeconfig = s.cluster_dir.join("kubeconfigs/bench-peer-apf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
             users:\n- name: {PEER_USER}\n  user:\n    client-certificate: {}\n    client-key: {}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: {PEER_USER}}}\ncurrent-context: c\n",
            pki.join("ca.crt").display(),
            crt.display(),
            key.display()
        ),
    )?;
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-peers-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": APF_GROUP}]
    }))?;
    match bindings.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(kubeconfig)
}

pub(crate) async fn remove_apf_cap(admin: &Client) -> anyhow::Result<()> {
    let levels: Api<PriorityLevelConfiguration> = Api::all(admin.clone());
    let schemas: Api<FlowSchema> = Api::all(admin.clone());
    for result in [
        schemas
            .delete(APF_LEVEL, &DeleteParams::default())
            .await
            .map(drop),
        levels
            .delete(APF_LEVEL, &DeleteParams::default())
            .await
            .map(drop),
    ] {
        match result {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The API server's counters of the cap's priority level: (dispatched, rejected).
/// The level's dispatched and refused request counters, and its seats
/// (`apiserver_flowcontrol_nominal_limit_seats`).
pub(crate) async fn apf_counts(admin: &Client) -> anyhow::Result<(u64, u64, u64)> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(req).await?;
    let sum = |metric: &str| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with(metric) && l.contains(&format!("priority_level=\"{APF_LEVEL}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    Ok((
        sum("apiserver_flowcontrol_dispatched_requests_total"),
        sum("apiserver_flowcontrol_rejected_requests_total"),
        sum("apiserver_flowcontrol_nominal_limit_seats"),
    ))
}
