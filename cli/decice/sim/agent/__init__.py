"""The sim's node agent, ``python -m decice.sim.agent``: it plays the kubelet of every
simulated node (``run``, with the node and pod objects of ``simnodes``) and is the
virtual kubelet of the nodes an interLink plugin backs (``vkubelet``, its pure parts in
``vkmodel``); ``nodes_service`` runs it as a managed local process."""
