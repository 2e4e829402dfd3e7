/* main.c - starling-agent: the device agent program (see cli.c and starling/agent.h). */
#include "starling/agent.h"

int main(int argc, char **argv)
{
    return sl_agent_main(argc, argv);
}
