from kubelet.status.status_manager import status_patch


def test_a_new_pod_ip_replaces_the_old_one_in_the_merge_list() -> None:
    api = {"podIP": "10.0.0.4", "podIPs": [{"ip": "10.0.0.4"}], "hostIPs": [{"ip": "1.2.3.4"}]}
    ours = {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}], "hostIPs": [{"ip": "1.2.3.4"}]}
    assert status_patch(api, ours) == {
        "podIP": "10.0.0.9",
        "podIPs": [{"ip": "10.0.0.9"}, {"$patch": "delete", "ip": "10.0.0.4"}],
        "$setElementOrder/podIPs": [{"ip": "10.0.0.9"}],
    }


def test_unchanged_ips_send_nothing() -> None:
    st = {"podIP": "10.0.0.4", "podIPs": [{"ip": "10.0.0.4"}]}
    assert status_patch(st, dict(st)) == {}
