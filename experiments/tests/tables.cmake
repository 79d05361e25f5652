# The table drivers (scaling_table, max_model_size): their logic in a GoogleTest program, their
# command lines through expect_exit.sh. Included from CMakeLists.txt, which defines
# gpipe_cli_test and ${bin}.
# The cost library (experiments/costs) alone: its tests link nothing above it.
gpipe_test(costs_tests SOURCES test_costs.cpp DEPS gpipe_costs)
if(TARGET costs_tests)
  target_include_directories(costs_tests PRIVATE ${PROJECT_SOURCE_DIR}/core/tests)
endif()
gpipe_test(tables_tests SOURCES test_tables.cpp test_max_size.cpp test_breakdown.cpp DEPS gpipe_tables gpipe_cli gpipe_models)
if(TARGET tables_tests)
  # One EXPECT_CONFIG_ERROR for every suite: the engine tests' test_util.h.
  target_include_directories(tables_tests PRIVATE ${PROJECT_SOURCE_DIR}/core/tests)
endif()
gpipe_cli_test(scaling_help 0 "normalised to naive-2" ${bin}/scaling_table --help)
gpipe_cli_test(scaling_k_exceeds_layers 2 "K=64 is larger than the" ${bin}/scaling_table --partitions 2,64)
gpipe_cli_test(scaling_m_does_not_divide_n 2 "M=3 must divide" ${bin}/scaling_table --chunks 1,3)
gpipe_cli_test(scaling_unknown_preset 2 "unknown preset 'huge'" ${bin}/scaling_table --preset huge)
gpipe_cli_test(scaling_unknown_link 2 "unknown link 'warp'" ${bin}/scaling_table --link warp)
gpipe_cli_test(scaling_unknown_model 2 "'resnet' is not" ${bin}/scaling_table --models resnet)
gpipe_cli_test(max_size_help 0 "--memory-budget" ${bin}/max_model_size --help)
gpipe_cli_test(max_size_budget_too_small 2 "is too small for any transformer-l in naive-1" ${bin}/max_model_size --models transformer-l --configs naive-1 --memory-budget 64KiB)
gpipe_cli_test(max_size_k_exceeds_layers 2 "pipeline-64 needs a model of at least 64 layers" ${bin}/max_model_size --models transformer-l --transformer-layers 1,2,4 --configs pipeline-64 --memory-budget 1MiB)
gpipe_cli_test(max_size_bad_budget 2 "unknown unit 'XB'" ${bin}/max_model_size --memory-budget 12XB)
gpipe_cli_test(max_size_budget_over_machine 2 "more than this machine's" ${bin}/max_model_size --memory-budget 64GiB)
gpipe_cli_test(max_size_unknown_config 2 "unknown configuration 'turbo-8'" ${bin}/max_model_size --configs naive-1,turbo-8)

# The planner (experiments/plan) and gpipe_plan / gpipe_train --plan auto.
gpipe_test(plan_tests SOURCES test_plan.cpp DEPS gpipe_trainer)
if(TARGET plan_tests)
  target_include_directories(plan_tests PRIVATE ${PROJECT_SOURCE_DIR}/core/tests)
endif()
set(tiny_mlp --model mlp --layers 4 --width 32 --batch-size 8 --max-chunks 4)
gpipe_cli_test(plan_help 0 "--memory-per-device" ${bin}/gpipe_plan --help)
# The best plan may be data-parallel (a launch.sh line) on a slow build: either names gpipe_train.
gpipe_cli_test(plan_ranks 0 "build/bin/gpipe_train --" ${bin}/gpipe_plan ${tiny_mlp})
gpipe_cli_test(plan_nothing_fits 2 "the smallest needs" ${bin}/gpipe_plan ${tiny_mlp} --memory-per-device 1KiB)
gpipe_cli_test(plan_bad_budget 2 "unknown unit 'XB'" ${bin}/gpipe_plan ${tiny_mlp} --memory-per-device 3XB)
gpipe_cli_test(plan_verify_rounds 0 "round 2 of 2, plan 2 of 2" ${bin}/gpipe_plan ${tiny_mlp} --verify 1 --verify-rounds 2 --grid "K=1,M=2")
gpipe_cli_test(plan_verify_paired 0 "paired prediction" ${bin}/gpipe_plan ${tiny_mlp} --verify 1 --verify-rounds 2 --verify-paired --calibration-rounds 1)
gpipe_cli_test(plan_bad_rounds 2 "--verify-rounds: 0 is not an integer in [" ${bin}/gpipe_plan ${tiny_mlp} --verify-rounds 0)
gpipe_cli_test(plan_calibration_rounds 0 "calibration round 2 of 2" ${bin}/gpipe_plan ${tiny_mlp} --calibration-rounds 2)
gpipe_cli_test(plan_bad_calibration_rounds 2 "--calibration-rounds: 0 is not an integer in [" ${bin}/gpipe_plan ${tiny_mlp} --calibration-rounds 0)
gpipe_cli_test(plan_bad_calibration_extra_rounds 2 "--calibration-extra-rounds: -1 is not an integer in [" ${bin}/gpipe_plan ${tiny_mlp} --calibration-extra-rounds -1)
# Two replicas run as gpipe_train processes, which exit 2 on a flag they do not know: none of
# the planner's own flags may reach them.
gpipe_cli_test(plan_replicas_take_no_planner_flags 0 "round 1 of 1, plan 1 of 1" ${bin}/gpipe_plan ${tiny_mlp} --top 1 --verify-rounds 1 --verify-paired --calibration-rounds 1 --calibration-extra-rounds 1 --link none --allreduce-gbs 0 --max-replicas 2 --grid "K=1,R=2,M=1,threads=1")
gpipe_cli_test(plan_bad_max_replicas 2 "--max-replicas: -1 is not an integer in [" ${bin}/gpipe_plan ${tiny_mlp} --max-replicas -1)
gpipe_cli_test(plan_grid_bad_virtual_stages 2 "got v=3" ${bin}/gpipe_plan ${tiny_mlp} --grid "K=2,M=2,schedule=zbv,v=3")
gpipe_cli_test(plan_bad_grid 2 "unknown plan key 'Z'" ${bin}/gpipe_plan ${tiny_mlp} --grid "K=1,Z=2")
gpipe_cli_test(plan_grid_uneven 2 "does not divide the batch of 8" ${bin}/gpipe_plan ${tiny_mlp} --grid "K=2,M=3")
gpipe_cli_test(train_plan_auto 0 "--plan auto chose" ${bin}/gpipe_train --model mlp --layers 4 --width 32 --batch-size 8 --steps 2 --plan auto --memory-per-device 64MiB)
gpipe_cli_test(train_plan_unknown 2 "--plan: fastest not in" ${bin}/gpipe_train --plan fastest --steps 1)
gpipe_cli_test(train_plan_nothing_fits 2 "no plan fits" ${bin}/gpipe_train --model mlp --layers 4 --batch-size 8 --steps 1 --plan auto --memory-per-device 1KiB)
