"""Family modules: the pieces that several algorithms share (feed-forward and recurrent actor-critic collection and
update, grouped rollouts for GRPO and DPO, Q-learning targets, the replay loop, off-policy continuous control).
An algorithm module imports these and `jaxrl.algos.base`, never another algorithm."""
