/* train_cmd.h - `starling train`: train a registry model on Fashion-MNIST. */
#ifndef STARLING_TRAIN_CMD_H
#define STARLING_TRAIN_CMD_H

/**
 * sl_cmd_train - run `starling train` with @argv[0] == "train"; prints a
 * progress bar per epoch and the test accuracy. Returns a process exit code.
 */
int sl_cmd_train(int argc, char **argv);

#endif /* STARLING_TRAIN_CMD_H */
