"""Gang placement: which group a pod belongs to and the PodGroups of scheduler-plugins
(``podgroup``), and binding a group only when minMember of it fit at one decision
(``placement``)."""
